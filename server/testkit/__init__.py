"""What the tests and the benchmarks share, kept out of both folders: plain-torch truth runs
(``truth``, ``torch_print``, ``opinfo_sweep``), the outer guard every sandbox test runs inside
(``sandbox_guard``), services a test starts itself (``services``: Redis, nginx; ``container``:
a confined user namespace), and the browser harness (``browser_support``). Not installed with
the package (pyproject excludes it): it is found in the checkout.
"""

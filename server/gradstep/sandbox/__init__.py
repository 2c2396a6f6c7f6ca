"""The sandbox: run untrusted code in a confined child forked from a warm zygote.

It knows nothing about autograd. It calls a *target* — a function
``run(code: str) -> bytes`` named by ``SandboxConfig.target`` — in a fresh,
confined child process and hands back the bytes, or a clear failure. What it runs,
preloads and warms up with is its caller's configuration (the server's is
``gradstep.runs.sandbox_config``: the tracer's job runner, torch).

API
---
::

    sb = Sandbox(SandboxConfig(target="pkg.module:run", preload=["numpy"], workers=2, extra_slots=2))
    sb.start()                # start the zygote (imports + warms the preloads); raises if it can't
    r = sb.run(code)          # thread-safe, blocking; at most `workers` runs at once, callers queue
    r.status                  # "ok" | "timeout" | "limit" | "crashed"
    r.output                  # the target's bytes when "ok" (untrusted: validate before use)
    r.limit, r.signal         # "memory" | "cpu" | "wall" | "output", "SIGKILL"... when relevant
    r.detail                  # one human sentence: which limit, which signal, what failed
    r.reported                # when the target raised: the child's own text (untrusted: quote it as its)
    r.seconds, r.timings      # wall time of run(); ms: queue, spare, the child's fork and layers, target
    # what the parent itself measured of the child (never the child's word; None: not measured):
    r.cpu_used, r.cpu_before  # s of CPU (user + sys) since its fork, at the run's end / at the hand-over
    r.wall_used               # s from the hand-over of the code to the result (or the kill)
    r.memory_peak_mb          # the slot's memory cgroup's high-water mark during the run
    r.vm_hwm_mb, r.vm_peak_mb # the child's peak resident memory and address space
    r.cpu_limit, r.data_limit_mb, r.wall_limit, r.memory_limit_mb  # the limits it ran under
    sb.health()               # {"zygote": bool, "layers": {name: "active" | "disabled" | "unavailable: why"},
                              #  "workers": runs at once, "slots": workers + extra_slots,
                              #  "busy": runs holding a slot, "spares": spares waiting, ...}
    sb.close()                # kill the zygote and every child, spares too; remove the cgroups (idempotent)

A snippet's own exceptions are the target's business (the tracer records them
in its trace, status "ok"). The sandbox reports what happens to the *process*:

* ``timeout`` / ``wall``: no result before ``wall_seconds`` (counted from when
  the code is handed to the child, not the queue); the child is SIGKILLed.
* ``limit`` / ``cpu``: RLIMIT_CPU — SIGKILL at ``cpu_seconds`` (the child is its PID
  namespace's pid 1, which ignores SIGXCPU: see ``pidns`` below; without that layer,
  SIGXCPU at ``cpu_seconds`` and SIGKILL a second later). It counts the child's few ms
  of fork and confinement, not a spare's wait.
* ``limit`` / ``memory``: the slot's memory cgroup OOM-killed the child.
  (Most allocations fail earlier and cleanly, inside the snippet, on RLIMIT_DATA.)
* ``limit`` / ``output``: the result is larger than ``max_output_bytes``.
* ``crashed``: the target raised, the child died by a signal or exited without
  a result, wrote a malformed result, a confinement layer failed (nothing ran),
  or the zygote died (it restarts on the next run).

**What the runner saw** (NOTE [what the runner saw of a run] in config.py). The child runs a
stranger's code in the target's own process, so anything it writes — its output, a trace saying it
stopped at a limit, ``reported`` — may be that code's words. Beside them a ``RunResult`` carries what
the parent measured itself, from the kernel's account of the child, which the child cannot write:

* ``cpu_used``: seconds of CPU time (user + system, every thread) the child had used since its fork
  when the run ended, from ``/proc/<pid>/stat`` read by the parent right after the result (the child
  is still there, held: NOTE [a child's exit waits for its release]) or just after sending a kill,
  else from the wait status's rusage (``wait4`` in the zygote) once it is gone. It is the clock
  RLIMIT_CPU counts and ``cpu_limit`` is in, to the clock tick (10 ms). ``cpu_before`` is its part
  before the code ran (fork, layers, prewarm), read as soon as the child reports itself confined
  with its code ("confined" frame, written before the target starts), so at most a moment of the
  target's start too; None where the parent could not read it.
* ``wall_used``: seconds from the hand-over of the code (when the wall clock of ``wall_seconds``
  starts) to the result, or to the kill; ``wall_limit`` is what the run was given from then
  (``wall_seconds``, or less when the caller's ``deadline`` came first).
* ``memory_peak_mb``: the slot's memory cgroup's ``memory.max_usage_in_bytes``, reset at the
  hand-over: the most memory charged to the child at once during the run, which is what
  ``memory_mb`` (``memory_limit_mb``) limits — its allocations, the zygote's pages it wrote to,
  files it read in; not the zygote's pages it only shares. None without the ``cgroup`` layer.
  ``vm_hwm_mb`` (peak resident memory, the ~250 MB of the zygote's pages it maps included; wait4's
  ``ru_maxrss`` once it is gone) and ``vm_peak_mb`` (peak address space) from ``/proc/<pid>/status``.
* ``cpu_limit`` (RLIMIT_CPU's soft limit, s) and ``data_limit_mb`` (RLIMIT_DATA's, MB: its whole data
  segment, what the child started with + ``data_mb(memory_mb)``), from ``/proc/<pid>/limits``:
  the data limit as read with ``cpu_before`` (not at the hand-over: a spare not ready yet may still
  be setting its limits then), the CPU limit as it was at the end if the child was still there (the
  server's job lowers it for a fix run; the code may lower it too, and neither can raise it:
  hard = soft), else as read with ``cpu_before``.

Each read goes through a descriptor of the child's ``/proc/<pid>`` opened when the zygote reported
its fork, so it can never read another process that got the pid since (observe.py). A child that
writes a forged result and exits, sleeps or spins is measured up to its answer
(tests/sandbox/test_run_observations.py). Cost: ≈0.1 ms at the start (the cgroup's reset, the
/proc reads with ``cpu_before``) and ≈0.2 ms at the end (the /proc reads, the cgroup's peak), on a
tiny snippet's ≈10 ms.

run() returns as soon as it has the whole result (or knows the outcome: a
kill for the wall clock or an oversized or malformed result; an EOF without a
result waits for the child's wait status, to say why). The child's exit
(≈8 ms: it unmaps a copy of the zygote) is off the request's path; with
``running()`` it also waits until the caller is done with the result (NOTE
[a child's exit waits for its release] in protocol.py). Its
slot stays busy until the zygote has reaped it (a child that outstays
``EXIT_GRACE`` after its run is done is killed, with its cgroup): a slot is
never reused while its previous child lives, and nothing that happens to a
child after its result (a signal, the memory cgroup's OOM kill) changes it.

**Runs and slots.** ``workers`` is how many runs may be under way at once;
a run counts from when it is handed a slot until its child is reaped, so a
child that wrote its result early and runs on still counts, and at most
``workers`` children ever run code together. There are
``workers + extra_slots`` slots: each has its own uid (``uid_base + slot``)
and cgroup and holds at most one child, a spare or a run's. A run waits for
one of the ``workers`` permits (callers beyond them queue, with their
deadline and cancel), then takes the slot that has been free longest, whose
spare has had the most time to get ready; the slot and the permit are given
back together once its child is gone (the slot first, so a run holding a
permit always finds a free slot). With ``extra_slots = 0`` there is one slot
per worker, as before: in a steady stream each run then waits for its slot's
next spare (the last child's exit, a fork, the layers, the prewarm; with 2
workers on an idle 2-CPU machine a tiny snippet took 26.6 ms p50 back to
back against 8.0 ms with runs 50 ms apart), which the extra slots make while
other slots serve runs. ``benchmarks/spares.py`` compares them, interleaved:
on 2 busy CPUs (load ≈10) 2 extra slots brought a back-to-back run's p50 to
0.58x (42 → 25 ms; over HTTP 0.66x; at load 1–5 0.55x and 0.67x), spaced
runs unchanged; 4 or 6 lowered the p95 further but not the p50, as a caller
then waits for a permit held by a child still exiting. They cost no CPU in a steady stream (one spare is
made per run whatever the slot count) and ≈11 MB of memory each while their
spare waits (its private pages, 10 MB, and page tables, 0.8 MB; the rest of
its ≈255 MB RSS is the zygote's, shared). Each slot's memory cgroup limits
its own child, so a spare counts against nothing but its slot; the host (or
the container's ``--memory``) must hold the zygote, ``workers`` runs of up
to ``memory_mb`` and the slots' spares.

**Spares.** For each free slot (the extra slots too) the zygote keeps one *spare*: a child forked
and confined with every layer below, before any code exists, blocked on its
code pipe. A run takes its slot's spare and writes the code to it; the
spare runs it and exits, never reused. When that child has been reaped (and
its slot's cgroup is empty) the parent asks the zygote for the slot's next
spare. So the fork and every layer, the cgroup join's RCU wait included, are
off the request's path. A run with no spare (``prefork=False``, the first
run after a zygote restart, a spare that died) has one forked on the spot,
the same path. A spare whose layer failed is not replaced eagerly: the run
that takes it reports the failure ("crashed", nothing ran), like any child.

Processes
---------
* **Zygote** (``zygote.py``): ``python -s -P -m gradstep.sandbox.zygote`` with a
  minimal environment (PATH, LANG, HOME=/nonexistent, OMP/OPENBLAS/MKL threads
  = 1, PYTHONPATH; with ``huge_pages`` also ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``,
  so malloc asks for transparent huge pages on the heap it grows: a child's new
  tensors and objects fault in 2 MB at a time, ~11,000 page faults of a 24-layer
  model's run become ~3,700 and its run takes ~10% less) — never a secret: the
  exec-time environment stays readable in its memory. It calls
  ``torch.set_num_threads(1)`` before any torch op, imports
  ``preload``, runs the target once on ``warmup`` (the server's is a tiny
  forward, backward and optimizer steps through the layers snippets use most:
  the tracer's lazy imports and torch's first-call set-up are then done once,
  for every child; a 24-layer model's run takes ~17 ms less),
  ``gc.freeze()``, backs its anonymous memory with transparent huge pages
  (``MADV_COLLAPSE``, best effort, ``SandboxConfig.huge_pages``: a fork copies
  and an exit tears down one page-table entry per 2 MB instead of 512, so fork
  + exit cost ~5 ms of CPU instead of ~15–20; copy-on-write stays per 4 KB
  page, so a child copies no more memory), opens its slots' ``cgroup.procs``,
  moves into the minimal root (layer 6: it needs no host file after warming),
  probes the layers, then serves fork requests, each child into a PID namespace
  of its own (layer 5). It is a single-threaded process and a child subreaper; EOF on its
  control socket (the server died) kills its children and ends it.
* **Parent ↔ zygote**: a Unix socketpair of framed JSON; each child's two pipe
  ends (the read end of its code pipe, the write end of its result pipe) go
  over it with SCM_RIGHTS; the parent keeps the other ends. The zygote reaps
  every child and reports its wait status and CPU time, so the parent can
  classify a death; kills go through the zygote, which cannot see a pid
  reused before it reaps it.
* **Child**: confines itself (below), waits for its code (length-prefixed, on
  the code pipe, which it then closes), writes a "confined" frame with its
  layer timings, runs the target, writes a length-prefixed result,
  ``_exit``\\s. The parent reads with a deadline (poll), checks the announced
  length against the cap before reading a payload, and never waits for EOF.

Layers, in the order a child applies them
-----------------------------------------
Measured here (root, kernel 6.18, cgroup v1, 2 vCPU; medians the child took per
layer, see ``RunResult.timings`` and ``benchmarks/sandbox_cost.py``): fork 3 ms
(7–9 without huge pages), setsid 0.03, cgroup 0.2–12, close_fds 0.1, namespaces
0.7–0.9, pidns 0.01 (a check; the zygote's unshare and setns around the fork 0.1–0.2), root 0.05–0.1 (a check: the zygote builds the root once at start, ≈10–30 ms),
mounts 0.3 (0.5–0.8 on the host's tree, without root), rlimits 0.2, uid 0.6 (clearing every
capability set), no_new_privs 0.05, seccomp 1.5–1.8 ms — all paid by a spare before its run.
**Prewarm.** A forked child's first run of the tracer writes to ~1,500 of the zygote's pages, each
a copy-on-write fault (~10 ms in all); ``SandboxConfig.prewarm`` has each spare run the target once
on a small snippet, confined, before its code arrives, so those copies are made off the request's
path. A confined run of a tiny snippet then answers in ≈10 ms with a ready spare (≈16 ms without
the prewarm; the tracer alone takes ≈5 ms in process), ≈31–38 ms when it
must fork on request (``prefork=False``; it was ≈35–40 ms to the result, ≈45
with the child's exit, before spares), against ≈1.5–2 s for a fresh ``python -c``
that imports torch. ``SandboxConfig.disable`` switches layers off
(for measurement and tests only). At start a probe child tries every layer;
one the host refuses is reported as ``"unavailable: <why>"`` in
``health()["layers"]`` and with a WARNING on stderr, and children run without it
— never silently. A layer that the probe found working but that then fails in
a child stops that child before the target runs ("crashed", fail closed).

1. ``setsid`` — own session/process group, so ``kill(0, …)`` reaches only the
   child. Never unavailable.
2. ``cgroup`` — per-slot v1 memory + pids cgroup (``cgroups.py``), created by the
   parent under ``cgroup_parent`` (default: the server's own cgroup); the child
   writes itself into its slot's ``cgroup.procs``. The hard backstop: shared-memory
   bombs, fork/thread bombs. Beside them, a v1 cpu cgroup around the zygote and all
   its children gives them together the CPU weight of one server process: each
   child's ``setsid`` would otherwise make it a scheduler autogroup of its own,
   weighed like the server's whole session (``health()["cpu_group"]``).
   Unavailable (read-only cgroupfs in an unprivileged container, cgroup v2 — not
   supported yet): the container's ``--memory`` and
   ``--pids-limit`` must stand in. Cost: ~0.2 ms when migrations come back to
   back, ~7–12 ms after an idle spell (a v1 migration waits for an RCU grace
   period) — the most expensive layer; a spare pays it (and the fork) before
   its run, off the request's path.
3. ``close_fds`` — 0/1/2 become /dev/null (a snippet writing to fd 1/2 reaches
   nobody), the result pipe moves to fd 3, the code pipe to fd 4 (closed once
   the code is read, before the target runs), everything else is closed. (The
   control socket and other children's pipes are closed in every child regardless.)
4. ``namespaces`` — ``unshare(NEWNS|NEWNET|NEWIPC|NEWUTS|NEWCGROUP)``: no network at
   all (even loopback is down: ENETUNREACH); its own cgroup namespace, so
   /proc/self/cgroup says ``/`` instead of naming the server's cgroups; its own UTS
   namespace, named ``gradstep`` (domain ``(none)``): ``uname``, ``socket.gethostname()``
   and /proc/sys/kernel/hostname never say the host's (or pod's) name, and seccomp
   refuses sethostname/setdomainname. Unavailable
   in an unprivileged container: use ``--network none`` there (and ``--hostname``).
5. ``pidns`` — a PID namespace of its own, whose pid 1 the child is: it can name no
   other process (not the server, the zygote, another run, nor by a host pid:
   ``getppid()`` is 0), and its /proc (``mounts``) lists itself alone. A PID namespace
   applies only to the children of whoever unshares it, so the *zygote* makes it:
   ``unshare(CLONE_NEWPID)``, ``fork()``, then ``setns`` on its own pidfd back to its
   own namespace for the next child (no extra fork; the zygote still waits for and
   kills the child by its host pid). The child checks that it is pid 1. Being a
   namespace's pid 1, it drops every signal it sends itself that it has no handler
   for, SIGKILL included, and the kernel's SIGXCPU too: so its RLIMIT_CPU hard limit
   is the soft one (SIGKILL at ``cpu_seconds``), and the check that the zygote
   outlived the uid change (``no_new_privs``) reads the zygote's pidfd, not
   ``getppid()``. Cost (``benchmarks/pidns_cost.py``, two runs at load 4–8 on 2
   vCPU): a fork + exit of an empty child into a new namespace takes 0.1–0.17 ms
   more (≈2 ms); a tiny snippet's run, against the same sandbox without ``pidns``
   in the same process run, 0.97x with a ready spare (5–7 ms p50), 0.94–0.96x back
   to back (49–60 ms), 0.98–1.01x forked per run (60–78 ms): below the noise (no
   extra fork). Unavailable
   where the zygote may not ``unshare``/``setns`` (no SYS_ADMIN; a seccomp profile
   refusing ``setns``: deploy/seccomp.json allows it).
6. ``root`` — the minimal root (``rootfs.py``), which the *zygote* builds once
   after warming and every child inherits: a read-only tmpfs holding only the
   import path's directories, the files the zygote has mapped (a shared library's
   whole directory, so ``import ssl`` or ``sqlite3`` later still finds its library),
   /dev/null, zero, full, random and urandom, a fresh /proc and an empty /tmp; the
   host's tree is detached (``pivot_root``). No /etc, /home, /var, /sys (no
   cgroupfs), no other checkout, not the project (``hide``; ``keep`` paths such as a
   venv inside it stay). ``health()["visible"]`` lists what it holds. The
   directories on the way are 0755, so modules imported after the uid drop are
   found even when the interpreter lives under a 0700 home. The child checks that
   its root is that one (≈0.05 ms). A child's own mount namespace is then a copy
   of this small tree. Unavailable where the zygote can't unshare a mount
   namespace or pivot (an unprivileged container; a seccomp profile denying
   ``pivot_root``): then ``mounts`` hides the project on the host's tree instead.
7. ``mounts`` (needs 4; never attempted without it) — all mounts private, then
   read-only/nosuid/nodev recursively (``mount_setattr``), nodev cleared again on
   the devices; a private size-limited tmpfs (``tmp_mb``, noexec, mode 0700, owned
   by the slot's uid) on /tmp as the work dir (cwd, entered once every layer is
   on, as the slot's uid; what the root shows under /tmp, a checkout's venv there,
   is bound back into it) — it disappears with the child's mount namespace; a
   fresh /proc of its PID namespace, ``hidepid=invisible,subset=pid``: process
   directories only (itself), none of the kernel's host-wide files (loadavg,
   meminfo, stat, uptime, vmstat, diskstats, kallsyms, modules, interrupts,
   pressure/, sys/, cpuinfo, ...: load, memory, I/O and uptime tell about other
   users' runs). torch needs none of them (the zygote initialised its CPU
   detection before forking; ``os.cpu_count()`` falls back to the affinity mask).
   Its ``/proc/self/mountinfo`` lists its own mount namespace: the minimal root's
   mounts, at the paths it sees anyway. Without ``root``: each ``hide`` path
   covered by an empty read-only tmpfs with the ``keep`` paths bound back
   read-only. Unavailable: use ``--read-only --tmpfs /tmp``.
8. ``rlimits`` — RLIMIT_DATA = the zygote's data size + a little less than
   ``memory_mb`` (``data_mb``: a run too big is refused an allocation and ends with
   its trace, before the cgroup kills it; not RLIMIT_AS: torch maps ~620 MB of
   address space), CPU (soft ``cpu_seconds``,
   hard +1; with ``pidns`` hard = soft, see 5), FSIZE = ``tmp_mb``, NOFILE, NPROC
   (per uid, so it binds after 9), CORE = 0.
9. ``uid`` — per-slot unprivileged uid/gid ``uid_base + slot``, ``slot <
   workers + extra_slots`` (one per slot, so two children alive at once never
   share one: runs could signal each other), no supplementary groups, and no capability
   in any set (``capabilities.py``: the bounding set is emptied first, with
   CAP_SETPCAP; a non-root server's file capabilities would survive the uid
   change, so every set is cleared and then checked). Without ``root``, everything
   the child needs must be imported before this (the stdlib here lives under a
   0700 home directory); ``preload`` lists what snippets may import beyond what
   torch and the tracer pull in. Unavailable when the server is neither root nor holding
   CAP_SETUID, CAP_SETGID and CAP_SETPCAP (the image's file capabilities:
   docs/deploy.md).
10. ``no_new_privs`` — PR_SET_NO_NEW_PRIVS (a setuid binary gains nothing) and
   PR_SET_PDEATHSIG(SIGKILL) (the uid change cleared it; the child dies with the zygote).
11. ``seccomp`` — last, via pyseccomp, with TSYNC: EPERM for exec*, fork/vfork,
   ``clone`` without CLONE_THREAD, every socket (Unix sockets by path ignore the
   network namespace), ptrace, process_vm_*, signals to any pid but its own,
   mount/unshare/setns/pivot_root, bpf, io_uring, keyctl, set*id, sethostname and other kernel
   surface; inotify and fanotify (a watch on the interpreter's or torch's files, which are the
   host's, would say when another run or the host opens them; only torch's libuv has inotify, for
   a store no snippet can reach); the host-wide mount counter (``statx`` asking for
   STATX_MNT_ID_UNIQUE, ``statmount``, ``listmount``: a mount's 64-bit unique ID grows with every
   run's ~30 mounts, so two runs' IDs would say how many came between them — the reusable IDs of
   /proc/self/mountinfo and fdinfo stay, a snapshot of how many mounts the host held when the
   child's own were made, before its code: README, "What it cannot see"); ``sysinfo`` (the machine's load, free memory, process count and uptime:
   what the /proc files ``mounts`` leaves out say; glibc's qsort reads a value the
   zygote cached, torch calls it only in libuv; ``os.sysconf("SC_PHYS_PAGES")`` reads
   0 and ``SC_AVPHYS_PAGES`` nonsense, as glibc ignores the error); ``clone3`` gets ENOSYS so glibc falls back to ``clone`` (EPERM would
   stop threads). Threads and multi-threaded matmul keep working. Unavailable
   without pyseccomp/libseccomp.

Host requirements: root (or, for every layer but ``cgroup``, an interpreter with
the file capabilities SYS_ADMIN, SETUID, SETGID, SETPCAP and KILL, as the container
image runs it), cgroup v1 memory + pids hierarchies, kernel ≥ 5.12
(``mount_setattr``), libseccomp2 and the ``pyseccomp`` package, and a range of
``workers + extra_slots`` uids from ``uid_base`` that nothing else on the host
uses (sandboxes on one host, server replicas included, need disjoint ranges).
"""

from gradstep.sandbox.config import LAYERS, RunResult, SandboxConfig
from gradstep.sandbox.runner import Sandbox

__all__ = ["LAYERS", "RunResult", "Sandbox", "SandboxConfig"]

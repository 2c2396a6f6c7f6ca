"""The server's routes, one APIRouter per area (the API's resources, the pages, embeds);
``gradstep.app`` includes them.

What a route needs from the app comes as a dependency (``deps.py``), never as a global or a
closure; what it serves, when more than a few lines, is built by the module of that job
(``gradstep.pages``, ``gradstep.embed``).
"""

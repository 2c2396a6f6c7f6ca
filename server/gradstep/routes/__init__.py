"""The API's routes, one APIRouter per resource; ``gradstep.app`` includes them.

What a route needs from the app comes as a dependency (``deps.py``), never as a global.
"""

"""The Faust worker application of krabka-coordination (DESIGN.md §6).

Not built yet: the app factory, settings, web views, CLI commands and the
``role`` decorator arrive with the worker-application issue.
"""

"""The worker's HTTP surface: `app.web.views` (the routes, installed by
`app.install`), `app.web.dashboard` (the page at ``/``), `app.web.event_stream`
and `app.web.feed` (the live event stream), `app.web.role_view` and
`app.web.term_view` (the JSON shapes of a role's value), and `app.web.routing`
(which worker owns a role's partition).
"""

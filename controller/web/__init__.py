"""The controller's live web view (`railfabric-controller --http HOST:PORT`): the fabric
drawn by rails, link states as they change, alarms, a page per switch with its interfaces and
counters (docs/operations.md, "The web view").

- `app.py`: the aiohttp application and its server, on the daemon's loop; read-only.
- `fabric_json.py`: what the JSON endpoints answer, from the admin API's own functions.
- `live.py`: the controller's events as changes pushed to each open page (Server-Sent Events).
- `static/`: the page itself (HTML, CSS, plain JS and SVG; nothing is fetched from elsewhere).
"""

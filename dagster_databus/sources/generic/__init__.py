"""What the SQL sources share, written once over a small description of each kind's SQL (its ``dialect.py``):
the catalog (``catalog``: schemas from the database's dictionary, null keys, unique keys), the epoch check
(``epoch``) and the key-range reads (``reads``: ranges, selections, pages, fingerprints). A kind's package holds
only what differs: its dialect, its types, its setup and its stream."""

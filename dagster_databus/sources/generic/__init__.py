"""What the SQL sources share, written once over a small description of each kind's SQL: the catalog
(``catalog``: schemas from the database's dictionary, null keys, unique keys) and the epoch check (``epoch``).
A kind's package holds only what differs: its dialect, its types, its setup and its stream."""

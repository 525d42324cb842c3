"""What the SQL source kinds share, written once over a dialect (each kind's ``dialect.py`` describes its own)."""

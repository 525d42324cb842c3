"""The sample databases users try first: MySQL's Sakila (film, payment, rental) on MariaDB and
SQLite's Chinook (Invoice, InvoiceLine, Track), with their own DDL. Every column must reach Delta
in its natural type, and the rows must equal what the database itself prints, by bootstrap and
after changes that arrive as change events."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

from dagster_databus.dataplane.delta import DeltaSnapshot
from tests.support.checks import assert_snapshots_match, cycle
from tests.support.harness import MysqlHarness, SqliteHarness, make_config
from tests.support.mariadb import MariaDBServer

D = decimal.Decimal

SAKILA = [
    """CREATE TABLE film (
      film_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT, title VARCHAR(128) NOT NULL, description TEXT,
      release_year YEAR, language_id TINYINT UNSIGNED NOT NULL, rental_duration TINYINT UNSIGNED NOT NULL DEFAULT 3,
      rental_rate DECIMAL(4,2) NOT NULL DEFAULT 4.99, length SMALLINT UNSIGNED,
      replacement_cost DECIMAL(5,2) NOT NULL DEFAULT 19.99, rating ENUM('G','PG','PG-13','R','NC-17') DEFAULT 'G',
      special_features SET('Trailers','Commentaries','Deleted Scenes','Behind the Scenes'),
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (film_id)) DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE payment (
      payment_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT, customer_id SMALLINT UNSIGNED NOT NULL,
      staff_id TINYINT UNSIGNED NOT NULL, rental_id INT DEFAULT NULL, amount DECIMAL(5,2) NOT NULL,
      payment_date DATETIME NOT NULL, last_update TIMESTAMP DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (payment_id)) DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE rental (
      rental_id INT NOT NULL AUTO_INCREMENT, rental_date DATETIME NOT NULL, inventory_id MEDIUMINT UNSIGNED NOT NULL,
      customer_id SMALLINT UNSIGNED NOT NULL, return_date DATETIME DEFAULT NULL, staff_id TINYINT UNSIGNED NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (rental_id)) DEFAULT CHARSET=utf8mb4""",
]
SAKILA_TYPES = {
    "film": {"film_id": "integer", "title": "string", "description": "string", "release_year": "integer",
             "language_id": "short", "rental_duration": "short", "rental_rate": "decimal(4,2)", "length": "integer",
             "replacement_cost": "decimal(5,2)", "rating": "string", "special_features": "string",
             "last_update": "timestamp"},
    "payment": {"payment_id": "integer", "customer_id": "integer", "staff_id": "short", "rental_id": "integer",
                "amount": "decimal(5,2)", "payment_date": "timestamp_ntz", "last_update": "timestamp"},
    "rental": {"rental_id": "integer", "rental_date": "timestamp_ntz", "inventory_id": "integer",
               "customer_id": "integer", "return_date": "timestamp_ntz", "staff_id": "short",
               "last_update": "timestamp"},
}


def _film_rows(first: int) -> list[str]:
    return [f"INSERT INTO film (film_id, title, description, release_year, language_id, rental_rate, length, "
            f"rating, special_features) VALUES ({first + i}, 'ACADEMY DINOSAUR {i}', 'A Epic Drama', 2006, 1, "
            f"{0.99 + i}, {86 + i}, '{rating}', '{features}')"
            for i, (rating, features) in enumerate([("PG", "Deleted Scenes,Behind the Scenes"),
                                                    ("G", "Trailers,Deleted Scenes"), ("NC-17", ""),
                                                    ("R", "Behind the Scenes,Commentaries,Trailers")])]


def test_sakila_on_mariadb(mariadb: MariaDBServer, tmp_path: Path, spark) -> None:
    db = MysqlHarness(mariadb)
    db.execute([*SAKILA, *_film_rows(1),
                "INSERT INTO payment VALUES (1, 1, 1, 76, 2.99, '2005-05-25 11:30:37', '2006-02-15 22:12:30')",
                "INSERT INTO rental VALUES (1, '2005-05-24 22:53:30', 367, 130, '2005-05-26 22:04:30', 1, "
                "'2006-02-15 21:30:53')"])
    config = make_config(tmp_path / "lake", db.source_config("shop", [(t, [f"{t}_id"]) for t in SAKILA_TYPES]))
    cycle(config, spark)
    db.execute([*_film_rows(11),
                "UPDATE film SET special_features = 'Commentaries,Behind the Scenes', rental_rate = 2.99 "
                "WHERE film_id = 1",
                "INSERT INTO payment VALUES (2, 1, 1, NULL, 0.00, '2005-05-28 10:35:23', NULL)",
                "UPDATE rental SET return_date = NULL WHERE rental_id = 1"])
    cycle(config, spark)
    for table, expected in SAKILA_TYPES.items():
        assert {k: v for k, v in DeltaSnapshot(config.lake, "shop", table).delta_types().items()
                if not k.startswith("__")} == expected, table
    assert_snapshots_match(config)
    films = {r["film_id"]: r for r in DeltaSnapshot(config.lake, "shop", "film").read().to_pylist()}
    printed = dict(db.query("SELECT film_id, special_features FROM film"))
    assert {k: r["special_features"] for k, r in films.items()} == printed  # MySQL's own text, either path
    assert films[1]["special_features"] == "Commentaries,Behind the Scenes"
    assert films[3]["special_features"] == films[13]["special_features"] == ""
    assert films[1]["rental_rate"] == D("2.99") and films[12]["rental_rate"] == D("1.99")
    stamps = dict(db.query("SELECT film_id, UNIX_TIMESTAMP(last_update) FROM film"))
    assert {k: r["last_update"].timestamp() for k, r in films.items()} == {k: float(v) for k, v in stamps.items()}


CHINOOK = [
    """CREATE TABLE [Invoice] ([InvoiceId] INTEGER NOT NULL, [CustomerId] INTEGER NOT NULL,
       [InvoiceDate] DATETIME NOT NULL, [BillingAddress] NVARCHAR(70), [BillingCity] NVARCHAR(40),
       [BillingPostalCode] NVARCHAR(10), [Total] NUMERIC(10,2) NOT NULL,
       CONSTRAINT [PK_Invoice] PRIMARY KEY ([InvoiceId]))""",
    """CREATE TABLE [InvoiceLine] ([InvoiceLineId] INTEGER NOT NULL, [InvoiceId] INTEGER NOT NULL,
       [TrackId] INTEGER NOT NULL, [UnitPrice] NUMERIC(10,2) NOT NULL, [Quantity] INTEGER NOT NULL,
       CONSTRAINT [PK_InvoiceLine] PRIMARY KEY ([InvoiceLineId]))""",
    """CREATE TABLE [Track] ([TrackId] INTEGER NOT NULL, [Name] NVARCHAR(200) NOT NULL, [AlbumId] INTEGER,
       [MediaTypeId] INTEGER NOT NULL, [GenreId] INTEGER, [Composer] NVARCHAR(220), [Milliseconds] INTEGER NOT NULL,
       [Bytes] INTEGER, [UnitPrice] NUMERIC(10,2) NOT NULL, CONSTRAINT [PK_Track] PRIMARY KEY ([TrackId]))""",
]
CHINOOK_TYPES = {
    "Invoice": {"InvoiceId": "long", "CustomerId": "long", "InvoiceDate": "timestamp_ntz", "BillingAddress": "string",
                "BillingCity": "string", "BillingPostalCode": "string", "Total": "decimal(10,2)"},
    "InvoiceLine": {"InvoiceLineId": "long", "InvoiceId": "long", "TrackId": "long", "UnitPrice": "decimal(10,2)",
                    "Quantity": "long"},
    "Track": {"TrackId": "long", "Name": "string", "AlbumId": "long", "MediaTypeId": "long", "GenreId": "long",
              "Composer": "string", "Milliseconds": "long", "Bytes": "long", "UnitPrice": "decimal(10,2)"},
}


def test_chinook_on_sqlite(tmp_path: Path, spark) -> None:
    db = SqliteHarness(tmp_path / "chinook.db")
    db.execute([*CHINOOK,
                "INSERT INTO Invoice VALUES (1, 2, '2009-01-01 00:00:00', 'Theodor-Heuss-Straße 34', 'Stuttgart', "
                "'70174', 1.98)",
                "INSERT INTO InvoiceLine VALUES (1, 1, 2, 0.99, 1), (2, 1, 4, 0.99, 1)",
                "INSERT INTO Track VALUES (1, 'For Those About To Rock (We Salute You)', 1, 1, 1, "
                "'Angus Young, Malcolm Young, Brian Johnson', 343719, 11170334, 0.99)"])
    config = make_config(tmp_path / "lake", db.source_config("shop", [
        ("Invoice", ["InvoiceId"]), ("InvoiceLine", ["InvoiceLineId"]), ("Track", ["TrackId"])]))
    cycle(config, spark)
    db.execute(["INSERT INTO Invoice VALUES (2, 4, '2009-01-02 00:00:00', 'Ullevålsveien 14', 'Oslo', '0171', 3.96)",
                "INSERT INTO InvoiceLine VALUES (3, 2, 6, 0.99, 4)",
                "UPDATE Track SET UnitPrice = 1.99, Name = 'Balls to the Wall' WHERE TrackId = 1",
                "UPDATE Invoice SET Total = 2.97 WHERE InvoiceId = 1"])
    cycle(config, spark)
    for table, expected in CHINOOK_TYPES.items():
        assert {k: v for k, v in DeltaSnapshot(config.lake, "shop", table).delta_types().items()
                if not k.startswith("__")} == expected, table
    assert_snapshots_match(config)
    invoices = {r["InvoiceId"]: r for r in DeltaSnapshot(config.lake, "shop", "Invoice").read().to_pylist()}
    assert invoices[1]["Total"] == D("2.97")
    assert invoices[2] == {**invoices[2], "Total": D("3.96"), "InvoiceDate": dt.datetime(2009, 1, 2),
                           "BillingAddress": "Ullevålsveien 14"}

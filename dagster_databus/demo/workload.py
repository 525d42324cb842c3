"""A shop schema (customers, orders, order_items) and a random transactional workload.

Used by ``make demo`` and by the tests: multi-row transactions of inserts, updates (including
key changes) and deletes, with integers, text, reals and NULLs, and a composite key.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

SCHEMA = """
CREATE TABLE IF NOT EXISTS customers (
    id           INTEGER PRIMARY KEY,
    name         TEXT NOT NULL,
    email        TEXT UNIQUE,
    city         TEXT,
    credit_limit REAL,
    signup_date  TEXT
);
CREATE TABLE IF NOT EXISTS orders (
    id          INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    status      TEXT NOT NULL,
    total       REAL,
    note        TEXT,
    placed_at   TEXT
);
CREATE TABLE IF NOT EXISTS order_items (
    order_id   INTEGER NOT NULL,
    line_no    INTEGER NOT NULL,
    sku        VARCHAR(32) NOT NULL,
    qty        INTEGER NOT NULL,
    unit_price REAL NOT NULL,
    discount   DOUBLE,
    PRIMARY KEY (order_id, line_no)
);
"""

MYSQL_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS customers (
        id INT PRIMARY KEY, name VARCHAR(100) NOT NULL, email VARCHAR(255) UNIQUE, city VARCHAR(50),
        credit_limit DOUBLE, signup_date VARCHAR(10))""",
    """CREATE TABLE IF NOT EXISTS orders (
        id INT PRIMARY KEY, customer_id INT NOT NULL, status VARCHAR(20) NOT NULL, total DOUBLE,
        note TEXT, placed_at VARCHAR(19))""",
    """CREATE TABLE IF NOT EXISTS order_items (
        order_id INT NOT NULL, line_no INT NOT NULL, sku VARCHAR(32) NOT NULL, qty INT NOT NULL,
        unit_price DOUBLE NOT NULL, discount DOUBLE, PRIMARY KEY (order_id, line_no))""",
]


class Database(Protocol):
    """The little of DB-API the workload needs, with '?' placeholders whatever the driver."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...
    def begin(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


class SqliteDatabase:
    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    def begin(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        self.conn.execute("ROLLBACK")

    def close(self) -> None:
        self.conn.close()


def _pyformat(sql: str) -> str:
    """'?' placeholders to pymysql's '%s' (a literal '%', as in 'id % 7', is doubled first)."""
    return sql.replace("%", "%%").replace("?", "%s")


class DbApiDatabase:
    """Transaction handling shared by the DB-API drivers (pymysql, oracledb)."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self.conn = connect()

    def begin(self) -> None:
        """Most drivers start a transaction with the first statement."""

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()


class MysqlDatabase(DbApiDatabase):

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            if params:
                cur.execute(_pyformat(sql), tuple(params))
            else:
                cur.execute(sql)  # pymysql interpolates nothing without parameters
            return list(cur.fetchall())

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(_pyformat(sql), rows)

    def begin(self) -> None:
        self.conn.begin()


CITIES = ["Lisbon", "Porto", "Oslo", "Kyoto", "Quito", "Accra", "Perth", None]
STATUSES = ["new", "paid", "shipped", "delivered", "cancelled"]
SKUS = [f"SKU-{n:04d}" for n in range(1, 60)]


def create_shop(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(SCHEMA)


class ShopWorkload:
    """Random business transactions against a shop database; deterministic for a seed.

    ``target`` is a SQLite file or a function returning a ``Database``.
    """

    def __init__(self, target: Path | Callable[[], Database], seed: int = 7) -> None:
        self.open: Callable[[], Database] = (lambda: SqliteDatabase(target)) if isinstance(target, Path) else target
        self.rng = random.Random(seed)
        self.clock = dt.datetime(2026, 1, 1)

    def _next_id(self, conn: Database, table: str) -> int:
        return int(conn.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {table}")[0][0])

    def _pick(self, conn: Database, sql: str) -> list[tuple[Any, ...]]:
        return conn.execute(sql)

    def new_customer_with_orders(self, conn: Database) -> None:
        r = self.rng
        cid = self._next_id(conn, "customers")
        conn.execute(
            "INSERT INTO customers (id, name, email, city, credit_limit, signup_date) VALUES (?, ?, ?, ?, ?, ?)",
            (cid, f"Customer {cid}", f"c{cid}@example.com" if r.random() < 0.9 else None, r.choice(CITIES),
             round(r.uniform(100, 5000), 2) if r.random() < 0.8 else None, f"2026-{r.randint(1, 12):02d}-01"),
        )
        for _ in range(r.randint(0, 3)):
            self.new_order(conn, cid)

    def new_order(self, conn: Database, customer_id: int) -> None:
        r = self.rng
        oid = self._next_id(conn, "orders")
        lines = r.randint(1, 5)
        items = [(oid, n, r.choice(SKUS), r.randint(1, 9), round(r.uniform(1, 200), 2),
                  round(r.random() * 0.3, 3) if r.random() < 0.3 else None) for n in range(1, lines + 1)]
        total = round(sum(q * p for _, _, _, q, p, _ in items), 2)
        self.clock += dt.timedelta(minutes=r.randint(1, 90))
        conn.execute("INSERT INTO orders (id, customer_id, status, total, note, placed_at) "
                     "VALUES (?, ?, 'new', ?, ?, ?)",
                     (oid, customer_id, total, "gift" if r.random() < 0.1 else None, self.clock.isoformat(sep=" ")))
        conn.executemany("INSERT INTO order_items (order_id, line_no, sku, qty, unit_price, discount) "
                         "VALUES (?, ?, ?, ?, ?, ?)", items)

    def transaction(self, conn: Database) -> None:
        """One business transaction of several rows, chosen at random."""
        r = self.rng
        kind = r.choices(["signup", "order", "progress", "edit", "cancel", "rekey", "bulk"],
                         weights=[3, 4, 4, 3, 2, 1, 1])[0]
        customers = [c for (c,) in self._pick(conn, "SELECT id FROM customers")]
        orders = [o for (o,) in self._pick(conn, "SELECT id FROM orders")]
        if kind == "signup" or not customers:
            self.new_customer_with_orders(conn)
        elif kind == "order":
            self.new_order(conn, r.choice(customers))
        elif kind == "progress" and orders:
            for oid in r.sample(orders, min(len(orders), r.randint(1, 4))):
                conn.execute("UPDATE orders SET status = ? WHERE id = ?", (r.choice(STATUSES), oid))
        elif kind == "edit":
            cid = r.choice(customers)
            conn.execute("UPDATE customers SET city = ?, credit_limit = ? WHERE id = ?",
                         (r.choice(CITIES), None if r.random() < 0.2 else round(r.uniform(0, 9000), 2), cid))
            items = self._pick(conn, "SELECT order_id, line_no FROM order_items")
            for oid, line in r.sample(items, min(len(items), 2)):
                conn.execute("UPDATE order_items SET qty = qty + 1, discount = ? WHERE order_id = ? AND line_no = ?",
                             (None if r.random() < 0.5 else 0.05, oid, line))
        elif kind == "cancel" and orders:
            oid = r.choice(orders)
            conn.execute("DELETE FROM order_items WHERE order_id = ?", (oid,))
            conn.execute("DELETE FROM orders WHERE id = ?", (oid,))
        elif kind == "rekey" and orders:
            # Renumber an order: its key changes in both tables within one transaction.
            oid, new_id = r.choice(orders), self._next_id(conn, "orders")
            conn.execute("UPDATE orders SET id = ? WHERE id = ?", (new_id, oid))
            conn.execute("UPDATE order_items SET order_id = ? WHERE order_id = ?", (new_id, oid))
        elif kind == "bulk" and customers:
            conn.execute("UPDATE customers SET signup_date = ? WHERE id % 7 = ?",
                         (f"2025-{r.randint(1, 12):02d}-15", r.randint(0, 6)))
        else:
            self.new_customer_with_orders(conn)

    def run(self, transactions: int, rollback_every: int = 0) -> int:
        """Apply ``transactions`` committed transactions; every ``rollback_every``-th is rolled back too."""
        conn = self.open()
        try:
            for n in range(1, transactions + 1):
                conn.begin()
                self.transaction(conn)
                if rollback_every and n % rollback_every == 0:
                    conn.rollback()  # never committed: capture must not see it
                    conn.begin()
                    self.transaction(conn)
                conn.commit()
        finally:
            conn.close()
        return transactions

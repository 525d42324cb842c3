"""Binlog event bytes real MySQL and MariaDB servers wrote, from public projects' test data, each with its
origin (repository, path, commit, test) and the values the origin says it holds. No MySQL server runs here:
these are the decoder's check against MySQL's own bytes.

All from go-mysql (https://github.com/go-mysql-org/go-mysql), replication/row_event_test.go at commit
e5cf1da82e49549d91dc702d654ccc099ccf10c1: event bodies (after the 19-byte header) as the Go tests hold them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GO_MYSQL = "github.com/go-mysql-org/go-mysql replication/row_event_test.go @ e5cf1da82e49549d91dc702d654ccc099ccf10c1"


@dataclass(frozen=True)
class PublicEvent:
    """An event body, where it comes from, the server that wrote it (as the origin says) and what it holds."""

    name: str
    body: bytes
    origin: str
    server: str
    meaning: dict[str, Any] = field(default_factory=dict)


_HELPER_MYSQL80 = (
    b'e\x00\x00\x00\x00\x00\x01\x00\x04test\x00\x06_types\x003\x10\x01\x01\x02\t\x03\x08\xf6\x04\x05\x01'
    b'\x02\t\x03\x08\xf6\x04\x05\r\n\x13\x13\x12\x12\x11\x11\xfe\x0f\xfe\x0f\xfc\xfc\xfc\xfc\xfc\xfc\xfc'
    b'\xfc\xfe\xfe\xff\xf5\xfe\xfe\xff\xff\xff\xff\xff\xff\xff1\x00\x08A\x1e\x04\x08A\x1e\x04\x08\x00\x06'
    b'\x00\x06\x00\x06\xee\xfe\xfc\x03\xfe@@\x00\x01\x02\x03\x04\x01\x02\x03\x04\xf7\x01\xf8\x01\x04\x04'
    b'\xf8\x01\xf7\x01\x04\x04\x04\x04\x04\x04\x04\x00\x00\xfc\xc3\xff\xff\x07\x01\x03\x00\x7f\x80\x03\x0c'
    b'\x1c\xe0??????\xe0\xe0\xe0\xe0\x07\x08\x00\x07\x06\x05\x04\x03\x02\x01\x04\xfc\x05\x02\x05b_bit\tn_b'
    b'oolean\tn_tinyint\nn_smallint\x0bn_mediumint\x05n_int\x08n_bigint\tn_decimal\x07n_float\x08n_double'
    b'\nnu_tinyint\x0bnu_smallint\x0cnu_mediumint\x06nu_int\tnu_bigint\nnu_decimal\x08nu_float\tnu_double'
    b'\x06t_year\x06t_date\x06t_time\x07t_ftime\nt_datetime\x0bt_fdatetime\x0bt_timestamp\x0ct_ftimestamp'
    b'\x06c_char\tc_varchar\x08c_binary\x0bc_varbinary\nc_tinyblob\x06c_blob\x0cc_mediumblob\nc_longblob\n'
    b'c_tinytext\x06c_text\x0cc_mediumtext\nc_longtext\x06e_enum\x05s_set\ng_geometry\x06j_json\x06s_set2'
    b'\x07e_enum2\x14g_geometrycollection\x0eg_multipolygon\x11g_multilinestring\x0cg_multipoint\tg_polygo'
    b'n\x0cg_linestring\x07g_point\x0b\x04\xe0\xe0\x1c\x1c\x05\n\x02\x011\x012\x02\x013\x014\x06\n\x02\x01'
    b'a\x01b\x02\x01c\x01d'
)
_HELPER_MARIADB105 = (
    b'\x1e\x00\x00\x00\x00\x00\x01\x00\x04test\x00\x06_types\x003\x10\x01\x01\x02\t\x03\x08\xf6\x04\x05'
    b'\x01\x02\t\x03\x08\xf6\x04\x05\r\n\x13\x13\x12\x12\x11\x11\xfe\x0f\xfe\x0f\xfc\xfc\xfc\xfc\xfc\xfc'
    b'\xfc\xfc\xfe\xfe\xff\xfc\xfe\xfe\xff\xff\xff\xff\xff\xff\xff1\x00\x08A\x1e\x04\x08A\x1e\x04\x08\x00'
    b'\x06\x00\x06\x00\x06\xee\xfe\xfc\x03\xfe@@\x00\x01\x02\x03\x04\x01\x02\x03\x04\xf7\x01\xf8\x01\x04'
    b'\x04\xf8\x01\xf7\x01\x04\x04\x04\x04\x04\x04\x04\x00\x00\xfc\xc0\xff\xff\x07\x01\x03\x00\x7f\xc0\x02'
    b'\x0f?\x00\x1c\x01\xe0\x08\xe0\t\xe0\n\xe0\x0b\xe0\r.\x07\x08\x00\x07\x06\x05\x04\x03\x02\x01\x04\xfc'
    b'\x05\x02\x05b_bit\tn_boolean\tn_tinyint\nn_smallint\x0bn_mediumint\x05n_int\x08n_bigint\tn_decimal'
    b'\x07n_float\x08n_double\nnu_tinyint\x0bnu_smallint\x0cnu_mediumint\x06nu_int\tnu_bigint\nnu_decimal'
    b'\x08nu_float\tnu_double\x06t_year\x06t_date\x06t_time\x07t_ftime\nt_datetime\x0bt_fdatetime\x0bt_tim'
    b'estamp\x0ct_ftimestamp\x06c_char\tc_varchar\x08c_binary\x0bc_varbinary\nc_tinyblob\x06c_blob\x0cc_me'
    b'diumblob\nc_longblob\nc_tinytext\x06c_text\x0cc_mediumtext\nc_longtext\x06e_enum\x05s_set\ng_geometr'
    b'y\x06j_json\x06s_set2\x07e_enum2\x14g_geometrycollection\x0eg_multipolygon\x11g_multilinestring\x0cg'
    b'_multipoint\tg_polygon\x0cg_linestring\x07g_point\x0b\x04\xe0\xe0\x1c\x1c\x05\n\x02\x011\x012\x02'
    b'\x013\x014\x06\n\x02\x01a\x01b\x02\x01c\x01d'
)
_NAMES_MYSQL80 = (
    b'j\x00\x00\x00\x00\x00\x01\x00\x04test\x00\x06_types\x00*\x10\x01\x01\x02\t\x03\x08\xf6\x04\x05\x01'
    b'\x02\t\x03\x08\xf6\x04\x05\r\n\x13\x13\x12\x12\x11\x11\xfe\x0f\xfe\x0f\xfc\xfc\xfc\xfc\xfc\xfc\xfc'
    b'\xfc\xfe\xfe\xff\xf5&\x00\x08A\x1e\x04\x08A\x1e\x04\x08\x00\x06\x00\x06\x00\x06\xce\xfc\xfc\x03\xfe@'
    b'@\x00\x01\x02\x03\x04\x01\x02\x03\x04\xf7\x01\xf8\x01\x04\x04\x00\x00\xfc\xc3\xff\x03\x01\x03\x00'
    b'\x7f\x80\x03\x0c\xe0\xe0??????\xe0\xe0\xe0\xe0\x07\x01\x00\x04\xfc\x94\x01\x05b_bit\tn_boolean\tn_ti'
    b'nyint\nn_smallint\x0bn_mediumint\x05n_int\x08n_bigint\tn_decimal\x07n_float\x08n_double\nnu_tinyint'
    b'\x0bnu_smallint\x0cnu_mediumint\x06nu_int\tnu_bigint\nnu_decimal\x08nu_float\tnu_double\x06t_year'
    b'\x06t_date\x06t_time\x07t_ftime\nt_datetime\x0bt_fdatetime\x0bt_timestamp\x0ct_ftimestamp\x06c_char'
    b'\tc_varchar\x08c_binary\x0bc_varbinary\nc_tinyblob\x06c_blob\x0cc_mediumblob\nc_longblob\nc_tinytext'
    b'\x06c_text\x0cc_mediumtext\nc_longtext\x06e_enum\x05s_set\ng_geometry\x06j_json\n\x01\xe0\x05\x05'
    b'\x02\x011\x012\x06\x05\x02\x01a\x01b'
)
_NAMES_MARIADB105 = (
    b'\x1a\x00\x00\x00\x00\x00\x01\x00\x04test\x00\x06_types\x00*\x10\x01\x01\x02\t\x03\x08\xf6\x04\x05'
    b'\x01\x02\t\x03\x08\xf6\x04\x05\r\n\x13\x13\x12\x12\x11\x11\xfe\x0f\xfe\x0f\xfc\xfc\xfc\xfc\xfc\xfc'
    b'\xfc\xfc\xfe\xfe\xff\xfc&\x00\x08A\x1e\x04\x08A\x1e\x04\x08\x00\x06\x00\x06\x00\x06\xce\xfc\xfc\x03'
    b'\xfe@@\x00\x01\x02\x03\x04\x01\x02\x03\x04\xf7\x01\xf8\x01\x04\x04\x00\x00\xfc\xc0\xff\x03\x01\x03'
    b'\x00\x7f\xc0\x03\x0e\xe0\xe0??????\xe0\xe0\xe0\xe0?.\x07\x01\x00\x04\xfc\x94\x01\x05b_bit\tn_boolean'
    b'\tn_tinyint\nn_smallint\x0bn_mediumint\x05n_int\x08n_bigint\tn_decimal\x07n_float\x08n_double\nnu_ti'
    b'nyint\x0bnu_smallint\x0cnu_mediumint\x06nu_int\tnu_bigint\nnu_decimal\x08nu_float\tnu_double\x06t_ye'
    b'ar\x06t_date\x06t_time\x07t_ftime\nt_datetime\x0bt_fdatetime\x0bt_timestamp\x0ct_ftimestamp\x06c_cha'
    b'r\tc_varchar\x08c_binary\x0bc_varbinary\nc_tinyblob\x06c_blob\x0cc_mediumblob\nc_longblob\nc_tinytex'
    b't\x06c_text\x0cc_mediumtext\nc_longtext\x06e_enum\x05s_set\ng_geometry\x06j_json\n\x01\xe0\x05\x05'
    b'\x02\x011\x012\x06\x05\x02\x01a\x01b'
)
_ENUM_MAP = (
    b'B\x0f\x00\x00\x00\x00\x01\x00\x05ttest\x00\x05aenum\x00\x02\x03\xfe\x02\xf7\x01\x03'
)
_ENUM_ROWS = (
    b'B\x0f\x00\x00\x00\x00\x01\x00\x02\x00\x02\xff\xfc\x01\x00\x00\x00\x01'
)
_ENUMS_MAP = (
    b'\x84\x0f\x00\x00\x00\x00\x01\x00\x05ttest\x00\x07numbers\x00\x02\x03\xfe\x02\xf7\x02\x02'
)
_ENUMS_ROWS = (
    b'\x84\x0f\x00\x00\x00\x00\x01\x00\x02\x00\x02\xff\xfc\x01\x00\x00\x00\x01\x00\xfc\x02\x00\x00\x00\x01'
    b'\x01'
)
_SET_MAP = (
    b'\xe7\x0e\x00\x00\x00\x00\x01\x00\x05ttest\x00\x04aset\x00\x02\x03\xfe\x02\xf8\x03\x03'
)
_SET_ROWS = (
    b'\xe7\x0e\x00\x00\x00\x00\x01\x00\x02\x00\x02\xff\xfc\x01\x00\x00\x00\x05\x00\x00'
)

# TestTableMapHelperMaps's table `_types`: b_bit, 9 signed numerics (boolean to double), 8 unsigned ones, YEAR,
# the temporal types, c_char (gbk_chinese_ci, 28), character and binary columns, ENUM/SET (utf8mb4_unicode_ci,
# 224; s_set2 and e_enum2 gbk_chinese_ci), geometry and JSON. The origin's expected maps: unsigned false for
# columns 1-9, true for 10-17; YEAR (18) false as MySQL writes it, true as MariaDB does.
_SIGNED = ("n_boolean", "n_tinyint", "n_smallint", "n_mediumint", "n_int", "n_bigint", "n_decimal", "n_float",
           "n_double")
_UNSIGNED = ("nu_tinyint", "nu_smallint", "nu_mediumint", "nu_int", "nu_bigint", "nu_decimal", "nu_float",
             "nu_double")
_TEXT = ("c_tinytext", "c_text", "c_mediumtext", "c_longtext")
_BINARY = ("c_binary", "c_varbinary", "c_tinyblob", "c_blob", "c_mediumblob", "c_longblob")


def _helper_maps(year_unsigned: bool, char: int, extra: dict[str, int]) -> dict[str, Any]:
    return {"unsigned": {**dict.fromkeys(_SIGNED, False), **dict.fromkeys(_UNSIGNED, True),
                         "t_year": year_unsigned},
            "collations": {"c_char": char, "c_varchar": 224, **dict.fromkeys(_BINARY, 63),
                           **dict.fromkeys(_TEXT, 224), **extra},
            "enum_set_collations": {"e_enum": 224, "s_set": 224},
            "members": {"e_enum": ("a", "b"), "s_set": ("1", "2")}}


_GEOMETRY = ("g_geometry", "g_geometrycollection", "g_multipolygon", "g_multilinestring", "g_multipoint",
             "g_polygon", "g_linestring", "g_point")
_HELPER = _helper_maps(False, 28, {})
_HELPER["enum_set_collations"].update({"s_set2": 28, "e_enum2": 28})
_HELPER["members"].update({"s_set2": ("3", "4"), "e_enum2": ("c", "d")})
_HELPER_MARIADB = _helper_maps(True, 28, {**dict.fromkeys(_GEOMETRY, 63), "j_json": 46})
_HELPER_MARIADB["enum_set_collations"].update({"s_set2": 28, "e_enum2": 28})
_HELPER_MARIADB["members"].update({"s_set2": ("3", "4"), "e_enum2": ("c", "d")})
# TestTableMapOptMetaNames: the same table without c_char's collation and the columns after j_json; the origin
# checks the names and the ENUM and SET members.
_NAMES = ("b_bit", *_SIGNED, *_UNSIGNED, "t_year", "t_date", "t_time", "t_ftime", "t_datetime", "t_fdatetime",
          "t_timestamp", "t_ftimestamp", "c_char", "c_varchar", "c_binary", "c_varbinary", "c_tinyblob", "c_blob",
          "c_mediumblob", "c_longblob", *_TEXT, "e_enum", "s_set", "g_geometry", "j_json")

TABLE_MAPS = (
    PublicEvent("HELPER_MAPS_MYSQL_8_0", _HELPER_MYSQL80, f"{GO_MYSQL} TestTableMapHelperMaps", "MySQL 8.0",
                _HELPER),
    PublicEvent("HELPER_MAPS_MARIADB_10_5", _HELPER_MARIADB105, f"{GO_MYSQL} TestTableMapHelperMaps",
                "MariaDB 10.5", _HELPER_MARIADB),
    PublicEvent("OPT_META_NAMES_MYSQL_8_0", _NAMES_MYSQL80, f"{GO_MYSQL} TestTableMapOptMetaNames", "MySQL 8.0",
                {"names": _NAMES, "members": {"e_enum": ("a", "b"), "s_set": ("1", "2")}}),
    PublicEvent("OPT_META_NAMES_MARIADB_10_5", _NAMES_MARIADB105, f"{GO_MYSQL} TestTableMapOptMetaNames",
                "MariaDB 10.5", {"names": _NAMES, "members": {"e_enum": ("a", "b"), "s_set": ("1", "2")}}),
)

# Table maps without optional metadata and v2 row events (the origin decodes them with rows.Version = 2), with
# the tables as the origin's comments declare them and the values it asserts (an ENUM's index, a SET's bits:
# here the member text they stand for).
_DIGITS = tuple(str(n) for n in range(258))
ROW_EVENTS = (
    (PublicEvent("ENUM_MAP", _ENUM_MAP, f"{GO_MYSQL} TestEnum", "MySQL (version not stated)",
                 {"columns": (("id", "int(11)"), ("aset", "enum('" + "','".join(_DIGITS[:9]) + "')"))}),
     PublicEvent("ENUM_ROWS", _ENUM_ROWS, f"{GO_MYSQL} TestEnum", "MySQL (version not stated)",
                 {"rows": ({"id": 1, "aset": "0"},)})),  # index 1
    (PublicEvent("ENUMS_MAP", _ENUMS_MAP, f"{GO_MYSQL} TestMultiBytesEnum", "MySQL (version not stated)",
                 {"columns": (("id", "int(11)"), ("num", "enum('" + "','".join(_DIGITS) + "')"))}),
     PublicEvent("ENUMS_ROWS", _ENUMS_ROWS, f"{GO_MYSQL} TestMultiBytesEnum", "MySQL (version not stated)",
                 {"rows": ({"id": 1, "num": "0"}, {"id": 2, "num": "256"})})),  # indexes 1 and 257
    (PublicEvent("SET_MAP", _SET_MAP, f"{GO_MYSQL} TestSet", "MySQL (version not stated)",
                 {"columns": (("id", "int(11)"), ("region", "set('" + "','".join(_DIGITS[1:19]) + "')"))}),
     PublicEvent("SET_ROWS", _SET_ROWS, f"{GO_MYSQL} TestSet", "MySQL (version not stated)",
                 {"rows": ({"id": 1, "region": "1,3"},)})),  # bits 0 and 2: 5
)

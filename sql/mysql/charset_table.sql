HEX(CONVERT(CONVERT(UNHEX(%s) USING {charset}) COLLATE {collation} USING utf8mb4))

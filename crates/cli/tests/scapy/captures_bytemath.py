"""Scapy-built captures of the byte_math tests (`kw-byte-math-*`; see captures.py).

Each builder follows Suricata's documentation of byte_math (docs.suricata.io,
rules/payload-keywords.html#byte-math): its two examples (`Testing
bytemath_body`, relative after a content, over TCP; `Byte extract and byte
math with byte test verification`, an rvalue from byte_extract, over UDP),
its table of options (oper + - * / << >>, relative, endian, string
hex/dec/oct, bitmask: "the AND operator will be applied to the extracted
value; the result will be right shifted by the number of bits equal to the
number of trailing zeros in the mask"), its note on a zero divisor ("there
will never be a match") and its table of the keywords using the result
(content offset/depth/distance/within, byte_test offset/value, byte_jump
offset, isdataat offset). The first comment of each builder says which.

The expected alerts in each test.yaml are Suricata's, and every one was
checked by running Suricata 7.0.10 over the same capture. Where the
documentation says nothing, they follow its source: in src/detect-bytemath.c
(DetectByteMathDoMatch) the operation is on 64 bits, then the bitmask;
`string` reads the number with strtoull (leading spaces and, for hex, a 0x
prefix accepted) and the next relative keyword starts after the characters
strtoull consumed, not after `bytes`; more than 4 bytes without `string`
never match; in src/detect-engine-content-inspection.c isdataat with a
variable of 100000000 or more (a subtraction below zero) finds no data.
Each rule has a datagram or connection it matches and one it just misses.
TCP captures put each payload in one segment of a connection closed both
ways, so a match is decided on that segment.
"""

from captures_stream import Stream, udp


def tcp(dport, sport, data):
    """A connection to `dport` sending `data` in one segment, then closed."""
    return Stream(dport, sport=sport).send(True, data).close().pkts


def relative():
    # payload-keywords, byte_math, first example `Testing bytemath_body`:
    # `content:"|00 04 93 F3|"; content:"|00 00 00 07|"; distance:4;
    # within:4; byte_math:bytes 4, offset 0, oper +, rvalue 248, result var,
    # relative;` -- it needs 4 bytes after the second content. Then the same
    # with the result used by a relative byte_test (it starts after the 4
    # bytes read), relative with content distance, a relative byte_math after
    # the second occurrence of its content when the first leads nowhere, and
    # a negative relative offset.
    head = b"\x00\x04\x93\xf3ABCD\x00\x00\x00\x07"
    pkts = []
    pkts += tcp(4460, 43001, head + b"\x00\x00\x00\x08")
    pkts += tcp(4460, 43002, head + b"\x00\x00\x01")  # 3 bytes: cannot read 4
    # 8 + 248 = 256 in the 2 bytes after the 4 read; then 255.
    pkts += tcp(4461, 43003, head + b"\x00\x00\x00\x08\x01\x00")
    pkts += tcp(4461, 43004, head + b"\x00\x00\x00\x08\x00\xff")
    # A 2-byte length counting itself: 6 - 2 = 4 bytes, then 5c 00; then
    # a length one too long (5c 00 before where the distance starts; one
    # too short would still match: with a distance from a variable,
    # Suricata 7 adds the start of the search to the end within gives).
    pkts += tcp(4462, 43005, b"\x00\x04\x93\xf3\x00\x06abcd\x5c\x00")
    pkts += tcp(4462, 43006, b"\x00\x04\x93\xf3\x00\x07abcd\x5c\x00")
    # The first LEN says 5 + 1 (no END there); the second says 0 + 1: END
    # one byte after it. Then the second says 1 + 1: END is one byte short.
    pkts += tcp(4463, 43007, b"LEN\x05LEN\x00xEND")
    pkts += tcp(4463, 43008, b"LEN\x05LEN\x01xEND")
    # AB ends at 3; offset -3 reads the byte at 0 (0x40 + 1 = 'A'); byte_test
    # relative reads the byte after it, 'A'. Then 0x41 + 1 = 'B'.
    pkts += tcp(4464, 43009, b"\x40AB")
    pkts += tcp(4464, 43010, b"\x41AB")
    return pkts


def operators():
    # payload-keywords, byte_math, its table: "oper <operator> Mathematical
    # operation to perform: +, -, *, /, <<, >>". 256 at offset 0 and rvalue
    # 4: each datagram holds one operator's result (260, 252, 1024, 64, 4096,
    # 16) after it, so each rule matches once and misses the others', and
    # 261 matches none. Then a subtraction below zero (64 bits: 1 - 2 is not
    # 255) and a division that truncates (15 / 4 is 3, not 4).
    pkts = [
        udp(44001 + i, b"\x01\x00" + r.to_bytes(2, "big"), dport=5200)
        for i, r in enumerate((260, 252, 1024, 64, 4096, 16, 261))
    ]
    pkts += [
        udp(44011, b"\x03\x01", dport=5201),
        udp(44012, b"\x01\xff", dport=5201),
        udp(44013, b"\x0f\x03", dport=5202),
        udp(44014, b"\x0f\x04", dport=5202),
    ]
    return pkts


def string():
    # payload-keywords, byte_math, its table: "string <num_type>: hex, dec,
    # oct" -- the number written in ASCII: 100 * 2 = 200 (dec), 0x1f + 1 =
    # 0x20 (hex), 0o755 >> 6 = 7 (oct), each checked by a byte_test on the
    # string after it, then a near miss. Then the cursor after the digits
    # read ("12" of "12KB", so KB follows at once), a 0x prefix and a
    # leading space (both read by strtoull), and 10 digits (2^32 / 2^25 =
    # 128: more than 32 bits).
    pairs = [
        (b"LEN=100;200", b"LEN=100;201"),
        (b"ID:1f,20", b"ID:1f,21"),
        (b"MODE 755 7", b"MODE 644 7"),
        (b"SIZE 12KB", b"SIZE 12 KB"),
        (b"ADDR=0x1234;1224", b"ADDR=0x1234;1234"),
        (b"Length: 42;84", b"Length: 42;85"),
        (b"N=4294967296;128", b"N=4294967295;128"),
    ]
    pkts = []
    for i, (hit, miss) in enumerate(pairs):
        pkts += [udp(45001 + 2 * i, hit, dport=5300), udp(45002 + 2 * i, miss, dport=5300)]
    return pkts


def endian_bitmask():
    # payload-keywords, byte_math, its table: "endian <type>: big, little"
    # and "bitmask <value>: the AND operator will be applied to the
    # extracted value; the result will be right shifted by the number of
    # bits equal to the number of trailing zeros in the mask" (Suricata
    # reads the mask as hex, with or without 0x, and applies it after the
    # operation). Little: 0x0201 + 1 = 0x0202 (near miss: the big-endian
    # sum); big, 3 bytes: 0x010203 >> 8 = 0x0102 (near miss: little's
    # 0x0302); (0x0128 + 16) & 0x0ff0 >> 4 = 0x13 (near misses: the mask
    # before the operation, 0x22, and no shift, 0x38); 0x30 & 0x10 >> 4 = 1
    # (near miss: 10 read as decimal gives 0). 4 bytes without string read
    # (0x05 + 1 = 6); 5 bytes never match in Suricata 7.
    pairs = [
        (b"LE\x01\x02\x02\x02", b"LE\x01\x02\x03\x01"),
        (b"BE\x01\x02\x03\x01\x02", b"BE\x01\x02\x03\x03\x02"),
        (b"BM\x01\x28\x13", b"BM\x01\x28\x22"),
        (b"FL\x30\x01", b"FL\x30\x00"),
        (b"W4\x00\x00\x00\x05\x06", b"W4\x00\x00\x00\x05\x05"),
        (b"W5\x00\x00\x00\x00\x05\x06", b"W5\x00\x00\x00\x00\x05\x05"),
    ]
    pkts = []
    for i, (hit, miss) in enumerate(pairs):
        pkts += [udp(46001 + 2 * i, hit, dport=5400), udp(46002 + 2 * i, miss, dport=5400)]
    pkts.append(udp(46020, b"BM\x01\x28\x38", dport=5400))
    return pkts


def consumers():
    # payload-keywords, byte_math, its table of keywords using the result:
    # byte_test offset (2 bytes after the one read: '!'), isdataat
    # (absolute: 3 * 4 = 12, a 13th byte or not; `!N,relative`: 1 + 2 = 3
    # bytes after the one read, absent or present; `N,relative` with 6 - 4
    # = 2, 7 - 4 = 3 and 2 - 4 below zero), content offset/depth (MARK at 4
    # + 2), distance (END 2 * 2 after) and within (END within 0 + 3), and
    # byte_jump offset (3 - 1 = 2 bytes on, a 1-byte jump to Z). One
    # connection each; the offset/depth rule on UDP datagrams (over TCP,
    # Suricata 7 inspects a content with offset or depth on the packet and
    # again on the stream: two alerts).
    payloads = [
        b"BT\x03ab!", b"BT\x02ab!",
        b"DA\x03" + b"x" * 10, b"DA\x03" + b"x" * 9,
        b"DR\x01ab", b"DR\x01abc",
        b"DU\x06ab", b"DU\x07ab", b"DU\x02ab",
        b"DS\x02abcdEND", b"DS\x02abcEND",
        b"WI\x00END", b"WI\x00xEND",
        b"JM\x03ab\x02cdZ", b"JM\x03ab\x01cdZ",
    ]
    pkts = []
    for i, data in enumerate(payloads):
        pkts += tcp(4470, 47001 + i, data)
    pkts += [udp(47101, b"OF\x04xyzMARK", dport=4470), udp(47102, b"OF\x04xyMARK", dport=4470)]
    return pkts


def rvalue_var():
    # payload-keywords, byte_math, second example `Byte extract and byte
    # math with byte test verification`: `byte_extract: 1, 0, extracted_val,
    # relative; byte_math: bytes 1, offset 1, oper +, rvalue extracted_val,
    # result var; byte_test: 2, =, var, 13;` -- 5 + 8 = 13 at offset 13, then
    # 12. Then the note "if oper is / and the divisor is 0, there will never
    # be a match" (0x20 / 4 = 8; a zero from byte_extract), an rvalue from an
    # earlier byte_math (2 * 3 + 1 = 7) and from a byte_extract with a
    # multiplier (16 - 2 * 4 = 8, not 16 - 2).
    pkts = [
        udp(48001, b"\x05\x08" + b"x" * 11 + b"\x00\x0d", dport=5600),
        udp(48002, b"\x05\x08" + b"x" * 11 + b"\x00\x0c", dport=5600),
    ]
    for i, data in enumerate(
        [
            b"DIV\x04\x20\x08", b"DIV\x00\x20\x00",
            b"CH\x02\x01\x07", b"CH\x02\x01\x06",
            b"MU\x02\x00\x10\x00\x08", b"MU\x02\x00\x10\x00\x0e",
        ]
    ):
        pkts.append(udp(48011 + i, data, dport=5601))
    return pkts


CAPTURES = {
    "kw-byte-math-relative": relative,
    "kw-byte-math-operators": operators,
    "kw-byte-math-string": string,
    "kw-byte-math-endian-bitmask": endian_bitmask,
    "kw-byte-math-consumers": consumers,
    "kw-byte-math-rvalue-var": rvalue_var,
}

#!/usr/bin/env python3
"""Write the seed inputs of the protocol targets: well-formed server
transcripts (login, then answers to the sink's requests), so the fuzzer
starts from conversations that reach deep into each client. The targets
that take structured input grow their corpora from nothing; their
checked-in corpora are minimized runs (`cargo fuzz cmin`)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "seed-" + name), "wb") as f:
        f.write(data)


# redis: the first byte picks the login (none, password and db 2, user and
# password); then the server's replies.
write("redis_replies", "xadd", b"\x00" + b"$15\r\n1700000000000-0\r\n" * 4)
write("redis_replies", "auth-select", b"\x01+OK\r\n+OK\r\n$3\r\n1-0\r\n:1\r\n$-1\r\n")
write("redis_replies", "auth-refused", b"\x02-WRONGPASS invalid username-password pair\r\n")
write("redis_replies", "errors", b"\x00-ERR no such key\r\n:42\r\n+QUEUED\r\n$0\r\n\r\n")


# postgres: the first byte picks a password (even) or none (odd).
def pg(tag, body=b""):
    return tag + struct.pack(">i", len(body) + 4) + body


ready = pg(b"Z", b"I")
auth_ok = pg(b"R", struct.pack(">i", 0))
status = pg(b"S", b"server_version\x0016.0\x00") + pg(b"K", struct.pack(">ii", 1, 2))
created = pg(b"C", b"CREATE TABLE\x00") + ready
inserted = pg(b"1") + pg(b"2") + pg(b"C", b"INSERT 0 1\x00") + ready
error = pg(b"E", b"SERROR\x00C23505\x00Mduplicate key\x00\x00") + ready
write("postgres_replies", "trust", b"\x01" + auth_ok + status + ready + created + inserted * 4)
write("postgres_replies", "cleartext", b"\x00" + pg(b"R", struct.pack(">i", 3)) + auth_ok + ready + created + inserted)
write("postgres_replies", "md5", b"\x00" + pg(b"R", struct.pack(">i", 5) + b"salt") + auth_ok + ready + created + error)
write(
    "postgres_replies",
    "scram",
    b"\x00"
    + pg(b"R", struct.pack(">i", 10) + b"SCRAM-SHA-256\x00\x00")
    + pg(b"R", struct.pack(">i", 11) + b"r=rOprNGfwEbeRWgbNEkqOserver,s=c2FsdA==,i=4096")
    + pg(b"R", struct.pack(">i", 12) + b"v=AAAA")
    + auth_ok
    + ready,
)
write("postgres_replies", "fatal", b"\x01" + pg(b"E", b"SFATAL\x00C3D000\x00Mdatabase does not exist\x00\x00"))

# nats: the first byte picks the credentials; the inbox token is 7.
info = b'INFO {"server_id":"x","version":"2.9.0","headers":true,"max_payload":1048576}\r\n'
inbox = b"_INBOX.ankusa.0000000000000007"


def hmsg(n, status=b"", payload=b'{"stream":"hooks","seq":1}'):
    head = b"NATS/1.0" + status + b"\r\n\r\n"
    line = b"HMSG %s.%d 1 %d %d\r\n" % (inbox, n, len(head), len(head) + len(payload))
    return line + head + payload + b"\r\n"


write("nats_replies", "publish", b"\x00" + info + b"+OK\r\nPONG\r\n" + b"".join(hmsg(n) for n in range(1, 5)))
write("nats_replies", "no-responders", b"\x01" + info + b"PONG\r\nPING\r\n" + hmsg(1, b" 503") + hmsg(2, b" 408"))
write("nats_replies", "auth", b"\x02" + info + b"-ERR 'Authorization Violation'\r\n")
write(
    "nats_replies",
    "msg",
    b"\x00" + info + b"PONG\r\nMSG %s.1 1 2\r\nok\r\n" % inbox + hmsg(0) + b"INFO {}\r\n" + hmsg(2),
)


# rabbitmq: the broker's side of the handshake, the channel, and confirms.
def frame(kind, channel, payload):
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def method(channel, class_id, method_id, args=b""):
    return frame(1, channel, struct.pack(">HH", class_id, method_id) + args)


def longstr(b):
    return struct.pack(">I", len(b)) + b


def shortstr(b):
    return struct.pack(">B", len(b)) + b


start = method(0, 10, 10, b"\x00\x09" + longstr(b"") + longstr(b"PLAIN AMQPLAIN") + longstr(b"en_US"))
tune = method(0, 10, 30, struct.pack(">HIH", 2047, 131072, 60))
open_ok = method(0, 10, 41, shortstr(b""))
channel_ok = method(1, 20, 11, longstr(b""))
select_ok = method(1, 85, 11)


def ack(tag):
    return method(1, 60, 80, struct.pack(">QB", tag, 0))


handshake = start + tune + open_ok + channel_ok + select_ok
returned = (
    method(1, 60, 50, struct.pack(">H", 312) + shortstr(b"NO_ROUTE") + shortstr(b"") + shortstr(b"hooks"))
    + frame(2, 1, struct.pack(">HHQH", 60, 0, 9000, 0))
    + frame(3, 1, b"x" * 9000)
)
write("rabbitmq_replies", "confirms", handshake + b"".join(ack(t) for t in range(1, 5)))
write("rabbitmq_replies", "returned", handshake + returned + ack(1) + method(1, 60, 120, struct.pack(">QB", 2, 0)))
write(
    "rabbitmq_replies",
    "closed",
    handshake
    + method(1, 20, 40, struct.pack(">H", 404) + shortstr(b"NOT_FOUND - no exchange") + struct.pack(">HH", 60, 40))
    + channel_ok
    + select_ok
    + frame(8, 0, b"")
    + method(0, 10, 60, shortstr(b"low on memory"))
    + ack(1),
)
write("rabbitmq_replies", "refused", start + method(0, 10, 50, struct.pack(">H", 403) + shortstr(b"ACCESS_REFUSED") + b"\0" * 4))

# mysql: the first byte picks a password (even) or none (odd); then the
# server's packets (3-byte length, sequence number, payload).
def my(seq, payload):
    return struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload


caps = struct.pack("<H", 0xF7FF)  # protocol 41, secure connection, ...
greeting = my(0, b"\x0a" + b"10.11.19-MariaDB\0" + struct.pack("<I", 7) + b"abcdefgh\0" + caps + b"\x2d"
               + struct.pack("<H", 2) + struct.pack("<H", 0x81BF) + b"\x15" + b"\0" * 10 + b"ijklmnopqrst\0"
               + b"mysql_native_password\0")
ok = lambda seq: my(seq, b"\x00\x00\x00\x02\x00\x00\x00")
prepared = my(1, b"\x00" + struct.pack("<IHHBH", 1, 0, 4, 0, 0)) + b"".join(my(2 + i, b"\x03def\0\0\0\x01?\0\x0c\x3f\0\0\0\0\0\xfd\x80\0\0\0\0") for i in range(4))
write("mysql_replies", "native", b"\x00" + greeting + ok(2) + ok(1) + prepared + ok(1) * 4)
write("mysql_replies", "switch", b"\x00" + greeting + my(2, b"\xfecaching_sha2_password\0" + b"n" * 20 + b"\0") + my(4, b"\x01\x03") + ok(5) + ok(1))
write("mysql_replies", "denied", b"\x01" + greeting + my(2, b"\xff\x15\x04#28000Access denied for user"))
write("mysql_replies", "too-long", b"\x00" + greeting + ok(2) + ok(1) + prepared + my(1, b"\xff\x7e\x05#22001Data too long for column 'source'"))


# kafka: Metadata v4, InitProducerId v0 and Produce v3 answers, each with
# its correlation id (1, 2, 3, ...).
def kafka(correlation, body):
    return struct.pack(">ii", len(body) + 4, correlation) + body


def kstr(s):
    return struct.pack(">h", len(s)) + s


partition = struct.pack(">hii", 0, 0, 1) + struct.pack(">ii", 1, 1) + struct.pack(">ii", 1, 1)
meta = (struct.pack(">i", 0) + struct.pack(">i", 1) + struct.pack(">i", 1) + kstr(b"127.0.0.1") + struct.pack(">i", 9092)
        + struct.pack(">h", -1) + kstr(b"tansu") + struct.pack(">i", 1) + struct.pack(">i", 1)
        + struct.pack(">h", 0) + kstr(b"hooks") + b"\x00" + struct.pack(">i", 1) + partition)
init = struct.pack(">ihqh", 0, 0, 4000, 0)
def produced(code, offset):
    return struct.pack(">i", 1) + kstr(b"hooks") + struct.pack(">i", 1) + struct.pack(">ihqq", 0, code, offset, -1) + struct.pack(">i", 0)
write("kafka_replies", "produce", kafka(1, meta) + kafka(2, init) + b"".join(kafka(3 + n, produced(0, n)) for n in range(4)))
write("kafka_replies", "refused", kafka(1, meta) + kafka(2, init) + kafka(3, produced(87, -1)))
write("kafka_replies", "no-producer", kafka(1, meta) + kafka(2, struct.pack(">ihqh", 0, -1, -1, -1)))


# stored records: the first byte picks the kind; a few short inputs.
for kind in range(4):
    write("stored_records", "kind-%d" % kind, bytes([kind]) + b"\x01" + b"\x00" * 24)

# config: YAML, a NUL, then the environment.
readme = open(os.path.join(HERE, "..", "README.md")).read()
block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
env = b"ANKUSA_ADMIN_TOKEN=t\nORDERS_SIGNING_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\nGH_SECRET_NEW=a\nGH_SECRET_OLD=b\n"
write("config", "readme", block.encode() + b"\0" + env)
write("config", "overrides", b"sources: {demo: {sinks: [log]}}\nsinks: {log: {component: log}}\n\0ANKUSA_DISPATCH__CONCURRENCY=64\nANKUSA_WAL__MODE=dual\n")
write("config", "escapes", b"sinks:\n  log: {component: log, options: {prefix: \"$${literal} ${X:-dflt}\"}}\nsources: {a: {sinks: [log], dedupe: {json_path: data.id}}}\n")

# admin: route byte, tenant, name, query, body.
def admin(route, tenant=b"acme", name=b"orders", query=b"", body=b""):
    return bytes([route]) + tenant + b"\n" + name + b"\n" + query + b"\n" + body

write("admin_bodies", "replay-dlq", admin(0, body=b'{"kind":"dlq","source":"demo","since":0,"rate":10.5}'))
write("admin_bodies", "replay-archive", admin(0, body=b'{"kind":"archive","since":1,"until":2,"tenants":["acme"]}'))
write("admin_bodies", "replay-patch", admin(1, name=b"job-1", body=b'{"state":"paused"}'))
write("admin_bodies", "source-new", admin(2, body=b'{"name":"gh","sinks":["log"],"verify":{"preset":"github","secret":["s"]},"dedupe":{"preset":"github"}}'))
write("admin_bodies", "source-put", admin(3, body=b'{"sinks":["log"],"on_verify_failure":"quarantine","forward_headers":["x-a"]}'))
write("admin_bodies", "rate", admin(4, body=b'{"rate":200,"burst":400}'))
write("admin_bodies", "dlq", admin(5, query=b"source=demo&limit=10&error_class=permanent&since=0&tenants=a,b&cursor=AAAA"))
write("admin_bodies", "quarantine", admin(6, query=b"tenant=acme&source=gh&limit=5"))
write("admin_bodies", "usage", admin(7))

# http_framing: a max-line byte, two read lengths, then a connection's bytes.
def conn(*requests):
    return bytes([200, 7, 61]) + b"".join(requests)

cl = b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
chunked = b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"
both = b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
write("http_framing", "pipelined", conn(cl, b"\r\n", chunked, b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n", both))
write("http_framing", "long-line", conn(cl, b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", cl))
write("http_framing", "upgrade", conn(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", cl))

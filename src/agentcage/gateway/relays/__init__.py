"""The mail relays: IMAP and SMTP from the cage to the mail hosts cage.yaml's `relays` names,
through the gateway, which speaks each protocol on the cage's behalf.

The cage's resolver answers a relay's host with the gateway's address, and the gateway's
firewall lets the cage reach the gateway on the relay ports (993 IMAPS, 465 SMTPS, 587
submission) and nothing more. TLS ends at the gateway, with a certificate of the cage's CA for
the host the cage names, and is made again toward the server, verified against the upstream
CA bundle, over a socket the one upstream connector dials. Between the two, the gateway reads
the protocol: the relay's secret is swapped into the login (IMAP LOGIN and AUTHENTICATE, SMTP
AUTH; PLAIN and LOGIN), what the cage sends is judged by the inspector chain as an HTTP body
is (a message whole, before a byte of it leaves), what the server sends is redacted, and
everything is audited. Whatever fails ends both sides and is audited as blocked.

The map: `settings` (what a relay is; the protocols' data, data/mail_relays.json), `tls`
(the certificates the cage sees, the verified client side), `listener` (the listeners and a
connection's life), `wire` (the two ends of a connection and what passes between them),
`smtp` and `imap` (where a protocol's login and messages are).
"""

"""Containers and compression: zip (read as the loaders read it), tar, 7-Zip, and the
compressed streams (gzip, bz2, xz, ...), each a registered format that hands its members to the
scan. May import `core`, `formats` and the scan context handed to it."""

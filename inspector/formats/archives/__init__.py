"""Containers and compression: zip (read as the loaders read it), tar, 7-Zip, and the
compressed streams (gzip, bz2, xz, ...), each a registered format that hands its members to the
scan through the context handed to it (`formats.context.FormatContext`). May import what a
format module may (`formats`)."""

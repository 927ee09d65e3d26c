"""`ckpt-inspector sign`: a folder signed with OpenSSF Model Signing (the command's front end;
the signing itself is `inspector.signing`)."""

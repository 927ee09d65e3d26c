"""The app's "Signed" badge: a checkpoint's folder checked against its OpenSSF Model Signing
signature off the UI thread (`inspector.signing`, with the public keys the user trusts), its
state and signer shown, and the signed statement's files in a detail view. Imports Qt, the
app's job runner and `signing`; nothing of the sandbox."""

"""OpenSSF Model Signing (OMS) signatures: reading a `model.sig` bundle, checking it with a key,
a certificate chain or (keyless) a Sigstore trust root given offline, checking a folder against
the statement it signs, and signing a folder with a key or a certificate.

The cryptography and the bundle format are the reference library's (`model_signing`, pinned):
this package checks what it is handed before the library sees it (a bounded regular file, one
JSON object, a supported key) and turns the library's answers into one-line errors and the
verify contract. It may import `core`, `integrity` (manifests, hashing, verify) and
`model_signing`; nothing else of the project imports `model_signing`. It never imports torch,
Qt, the GUI, the CLI or the sandbox: tensor digests are injected by the caller.
"""

"""`python -I -m inspector.sandbox.worker`: one jailed job on stdin/stdout."""

from inspector.sandbox.worker.main import main

main()

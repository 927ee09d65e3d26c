"""The re-exports a scan reads from installed source are kept on disk per file version: a
second process reads them without parsing, and a changed file is read again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = ("import json, sys; from inspector.scan.pickles import static_source as s; "
         "parsed = []; tree = s._tree.__wrapped__; "
         "s._tree = lambda p: (parsed.append(str(p)), tree(p))[1]; "
         "print(json.dumps([s.resolve(sys.argv[1], sys.argv[2]), parsed]))")


def _resolve(tmp_path, module, name, extra_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(extra_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PROBE, module, name], capture_output=True,
                          text=True, timeout=120, check=True, env=env, cwd=tmp_path)
    return json.loads(done.stdout)


def test_a_reexport_is_read_once_per_file_version(tmp_path):
    lib = tmp_path / "lib"
    (lib / "shipped").mkdir(parents=True)
    handler = lib / "shipped" / "handler.py"
    handler.write_text("from subprocess import Popen\n")
    found, parsed = _resolve(tmp_path, "shipped.handler", "Popen", lib)
    assert found == ["subprocess", "Popen"] and str(handler) in parsed
    # a second process: the same answer from the cache, nothing parsed
    assert _resolve(tmp_path, "shipped.handler", "Popen", lib) == [["subprocess", "Popen"], []]
    handler.write_text("from os import system as Popen\n")  # another version of the file
    found, parsed = _resolve(tmp_path, "shipped.handler", "Popen", lib)
    assert found == ["os", "system"] and str(handler) in parsed

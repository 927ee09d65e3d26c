"""Batch jobs over many files: a stable share of the list per process, and results that resume.

`--shard I/N` gives process I (0-based, as Kubernetes' JOB_COMPLETION_INDEX counts) of N the
files whose path hashes to I modulo N: a partition that needs no coordination, holds when files
are added or removed (the others keep their shard), and is the same on every machine that sees
the same paths. `--results FILE.jsonl` is a run journal (`run.journal`): one record per file as
it finishes, fsync'd and hash-chained, so a preempted job that runs again skips what is already
there; a record cut short by the kill is not readable and that file is simply done again.
Each result is kept with the job it was made for (`Job`: the command, the SHA-256 of the
manifest's content, the options that change results, the version that made it) and is reused
only by a run of the same job: a result checked against another manifest, or judged by another
version's rules, says nothing about this one.
A run notes itself on a session line (its command, shard, job and working folder) and, once it
has finished its share, appends a completion line naming how many files' results of its kind
the file holds: a run whose session line is not followed by its own completion line before
the next run's session line or the file's end (unless the same shard, run again with the same
command, finished later), or whose count differs, is of a shard that did not finish.
`ckpt-inspector merge` reads the journals of every shard into one report.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import inspector
from inspector.fleet.objstore import RemoteObject
from inspector.run import journal

SESSION_KIND = "batch.session"
END_KIND = "batch.end"
"""The line a run appends when it has done its whole share: `for` (its kind of results),
`results` (how many files' results of that kind the file then holds) and, where the share as
a whole failed a check no one file's result holds (a verify shard that compared nothing),
`errors`: each such failure in one line."""
_NAMED = 3
"""Results outside their shard named one by one; the rest are counted."""
Where = str | os.PathLike[str] | RemoteObject
"""A file (or folder) on disk, or an object in a store, whose result is kept."""


@dataclass(frozen=True)
class JobSlice:
    """A batch job's slice of the files: process `index` of `count` (0 <= index < count), chosen
    with `--shard I/N` (the flag keeps the word batch engines use; "shard" in this code is one
    file of a checkpoint saved as several)."""

    index: int = 0
    count: int = 1

    def owns(self, key: str) -> bool:
        """Whether the file named `key` (its path as the command found it) is this slice's."""
        if self.count == 1:
            return True
        digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index

    @property
    def label(self) -> str:
        """How the slice is written on the command line (`--shard I/N`)."""
        return f"{self.index}/{self.count}"


def parse_job_slice(text: str) -> JobSlice:
    """`I/N` with 0 <= I < N; ValueError with a one-line reason otherwise."""
    head, sep, tail = text.partition("/")
    try:
        index, count = int(head), int(tail)
    except ValueError:
        index = count = -1
    if not sep or count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard wants I/N with 0 <= I < N (e.g. 0/4), not {text!r}")
    return JobSlice(index, count)


def identity(path: Where) -> list[Any] | None:
    """Size, inode and the modification and change times (a folder's: over every file in
    it, and their count; an object's: its size and ETag), so a checkpoint written since its
    result was kept is done again, even with its modification time put back (the change time
    cannot be). Corruption below the file system changes none of them: a new results file
    re-checks everything."""
    if isinstance(path, RemoteObject):
        return path.identity
    try:
        st = os.stat(path)
        if not os.path.isdir(path):
            return [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
        total, newest, count, inodes = 0, max(st.st_mtime_ns, st.st_ctime_ns), 0, 0
        for folder, _, names in os.walk(path):
            for name in names:
                inner = os.stat(os.path.join(folder, name))
                total, count = total + inner.st_size, count + 1
                newest = max(newest, inner.st_mtime_ns, inner.st_ctime_ns)
                inodes += inner.st_ino  # a file replaced by another is another inode
    except OSError:
        return None
    return [total, newest, count, inodes]


@dataclass(frozen=True)
class Job:
    """What a batch run's results depend on besides each file: its kind, its command (less
    what differs between shards, `_job_command`), the SHA-256 of the manifest's content it
    checks against, the options that change a result but are not in the command text, and
    the version of ckpt-inspector whose rules judged it (an upgrade's scanner may judge the
    same bytes otherwise)."""

    kind: str
    command: str
    manifest: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    version: str = field(default_factory=lambda: inspector.__version__)

    @property
    def id(self) -> str:
        """One SHA-256 of it all: kept results are reused, and shards merged, only under
        the same."""
        doc = {"for": self.kind, "command": _job_command({"for": self.kind,
                                                          "command": self.command}),
               "manifest": self.manifest, "options": dict(self.options),
               "version": self.version}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


@dataclass
class ResultsLog:
    """The finished files of one kind of batch job, read from and appended to a results file."""

    path: Path
    job: Job
    done: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """key -> the record made for this job: its `result` and the file's `identity` then."""
    held: set[str] = field(default_factory=set)
    """The keys of every result of this kind the file holds, of any job."""
    problems: tuple[journal.JournalProblem, ...] = ()

    @property
    def kind(self) -> str:
        """The kind of its results (`scan.result`, `verify.result`, `report.file`)."""
        return self.job.kind

    @property
    def other_jobs(self) -> int:
        """How many files have results in the file made for another job only (another
        manifest, options or version, or a run of a version that named no job)."""
        return len(self.held - set(self.done))

    def finished(self, key: str, path: Where) -> Mapping[str, Any] | None:
        """The kept result for `key`, unless the file at `path` changed since."""
        record = self.done.get(key)
        if record is None or record.get("identity") != identity(path):
            return None
        return record["result"]

    def begin(self, session: Mapping[str, Any]) -> None:
        """Note what this run is (command, shard, environment), its job (`Job`, with the
        manifest's SHA-256 and the options, so a merge can compare them) and the working
        folder its command's relative paths resolve from (`cwd`), so a merge can say it and
        tell shards of one command text run in different folders (other files) apart."""
        journal.append(self.path, SESSION_KIND,
                       {"for": self.kind, **session, "job": self.job.id,
                        "manifest_sha256": self.job.manifest, "options": dict(self.job.options),
                        "version": self.job.version, "cwd": os.path.abspath(os.curdir)})

    def record(self, key: str, path: Where, result: Mapping[str, Any]) -> None:
        """Append one finished file's result (durable before this returns)."""
        fields = {"key": key, "identity": identity(path), "job": self.job.id, "result": result}
        journal.append(self.path, self.kind, fields)
        self.done[key] = fields
        self.held.add(key)

    def end(self, errors: list[str] | tuple[str, ...] = ()) -> None:
        """Note that this run did its whole share: the completion line, naming how many
        files' results of its kind the file holds (those kept from earlier runs and this
        run's) and the `errors` of the share as a whole, which a merge reports. Without it,
        before another run's session line or the file's end, or with results after it, a
        merge calls the run unfinished."""
        said = {"errors": list(errors)} if errors else {}
        journal.append(self.path, END_KIND, {"for": self.kind, "results": len(self.held),
                                             **said})


def open_results(path: str | os.PathLike[str], job: Job) -> ResultsLog:
    """The results file at `path`, with what earlier runs of the same job finished (nothing
    if it is new)."""
    target = Path(path)
    read = journal.read(target) if target.exists() else None
    log = ResultsLog(target, job, problems=read.problems if read else ())
    for entry in read.sound if read else ():
        if entry.kind == job.kind and "result" in entry.record:
            log.held.add(str(entry.record["key"]))
            if entry.record.get("job") == job.id:
                log.done[str(entry.record["key"])] = entry.record
    return log


@dataclass(frozen=True)
class BatchResults:
    """Every finished file of every results file given to a merge, and what produced them."""

    results: dict[str, dict[str, list[Mapping[str, Any]]]]
    """kind -> key -> every sound result recorded for that key, in the order read."""
    sessions: tuple[Mapping[str, Any], ...]
    problems: tuple[tuple[Path, journal.JournalProblem], ...]
    authenticated: bool = False
    """Every results file was sealed with the seal key and read with it."""
    unannounced: tuple[Path, ...] = ()
    """Results files holding results and no session line (every batch command that finishes
    writes one): what job and slice they are cannot be said."""
    strays: tuple[tuple[Path, str], ...] = ()
    """(results file, key) of each result for a file none of that file's shards owns."""
    jobless: tuple[tuple[Path, str], ...] = ()
    """(results file, key) of each result made for a job (`Job.id`, or none) that none of
    that file's session lines names: no run of it wrote that line."""
    unfinished: tuple[str, ...] = ()
    """Why each results file whose shard did not finish is so (one line each)."""
    session_files: tuple[Path, ...] = ()
    """The results file of each session line (`sessions[i]` is read from `session_files[i]`)."""
    failed_runs: tuple[tuple[Path, str], ...] = ()
    """(results file, error) of each error a completion line names: its share as a whole
    failed a check."""
    shares: dict[Path, dict[str, list[Mapping[str, Any]]]] = field(default_factory=dict)
    """results file -> kind -> every sound result it holds: what each shard itself recorded,
    for a check over a shard's whole share (`merge` re-derives a verify shard that compared
    nothing)."""


def read_results(paths: list[Path]) -> BatchResults:
    """Read results files for a merge; only lines whose own seal holds are kept, and every
    damaged line is a named problem."""
    results: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    sessions: list[Mapping[str, Any]] = []
    problems: list[tuple[Path, journal.JournalProblem]] = []
    unannounced: list[Path] = []
    strays: list[tuple[Path, str]] = []
    jobless: list[tuple[Path, str]] = []
    unfinished: list[str] = []
    session_files: list[Path] = []
    failed_runs: list[tuple[Path, str]] = []
    shares: dict[Path, dict[str, list[Mapping[str, Any]]]] = {}
    authenticated = bool(paths)
    for path in paths:
        read = journal.read(path)
        authenticated = authenticated and read.authenticated
        problems += [(path, p) for p in read.problems]
        held = len(sessions)
        keys: list[str] = []
        made_for: list[str] = []  # each result's job, as text (a forged one: any JSON type)
        for entry in read.sound:
            if entry.kind == SESSION_KIND:
                sessions.append(entry.record)
                session_files.append(path)
            elif entry.kind == END_KIND:
                failed_runs += [(path, error) for error in _errors(entry.record)]
            elif "key" in entry.record and "result" in entry.record:
                results.setdefault(entry.kind, {}).setdefault(
                    str(entry.record["key"]), []).append(entry.record["result"])
                shares.setdefault(path, {}).setdefault(entry.kind, []).append(
                    entry.record["result"])
                keys.append(str(entry.record["key"]))
                made_for.append(str(entry.record.get("job")))
        if keys and len(sessions) == held:
            unannounced.append(path)
        else:
            unfinished += _unfinished(path, read.sound)
            ran = {str(session.get("job")) for session in sessions[held:]}
            jobless += [(path, key) for key, job in zip(keys, made_for, strict=True)
                        if job not in ran]
        strays += [(path, key) for key in _unowned(keys, sessions[held:])]
    return BatchResults(results, tuple(sessions), tuple(problems), authenticated,
                        tuple(unannounced), tuple(strays), tuple(jobless), tuple(unfinished),
                        tuple(session_files), tuple(failed_runs), shares)


def _errors(end: Mapping[str, Any]) -> list[str]:
    """A completion line's errors, each as text (a forged one: any JSON, said as it is)."""
    errors = end.get("errors") or []
    return [str(e) for e in errors] if isinstance(errors, list) else [str(errors)]


_AGAIN = "run that shard again with the same results file (it resumes: kept results stay)"


def _who(kind: str, session: Mapping[str, Any] | None, shards: str = "?") -> str:
    """`verify --shard 0/4` of a session line (or of a kind's results that have none)."""
    shard = str(session.get("shard")) if session is not None else shards
    return f"{kind.partition('.')[0]} --shard {shard}"


def _run_of(session: Mapping[str, Any]) -> tuple[str, ...]:
    """What one run is: a later session line with the same is the same shard run again (a
    resume), whose completion covers an earlier, killed run of it."""
    return tuple(str(session.get(k)) for k in ("for", "command", "shard", "cwd"))


def _unfinished(path: Path, sound: tuple[journal.JournalEntry, ...]) -> list[str]:
    """Why each run (session) that wrote `path` did not finish, if one did not. Every session
    line must have a completion line of its own (of its kind) before another run's session
    line or the file's end; a shard run again with the same command (a resume) may finish
    for a killed run of it. Each completion line must count the results of its kind that
    the file holds before it (as the run that wrote it counted them)."""
    said: list[str] = []
    shards: dict[str, list[str]] = {}
    for entry in sound:
        if entry.kind == SESSION_KIND:
            shards.setdefault(str(entry.record.get("for")), []).append(
                str(entry.record.get("shard")))
    ended: set[str] = set()  # kinds a completion line was seen for
    held: dict[str, set[str]] = {}  # kind -> distinct keys of its results so far
    segment: list[journal.JournalEntry] = []
    finished: list[tuple[int, tuple[str, ...]]] = []  # (completion line, run) of each run
    killed: list[tuple[int, tuple[str, ...], str]] = []  # (session line, run, why) unfinished

    def unfinished(kind: str, session: Mapping[str, Any] | None, how: str) -> str:
        who = _who(kind, session, " and ".join(sorted(set(shards.get(kind, [])))) or "?")
        command = f"; its command: {session.get('command')}" if session is not None else ""
        return (f"{path}: {who} did not finish ({how}), so files it owns may never have been "
                f"checked; {_AGAIN}{command}")

    def close(end: journal.JournalEntry | None) -> None:
        lines = [e for e in segment if e.kind == SESSION_KIND]
        sessions = [e.record for e in lines]
        owner = sessions[-1] if end is not None and sessions else None
        if owner is not None and owner.get("for") != end.record.get("for"):
            owner = None  # the completion line is of another kind: not this run's
        if owner is not None:
            finished.append((end.line, _run_of(owner)))
        seen: set[tuple[str, ...]] = set()
        for line in lines:
            session, run = line.record, _run_of(line.record)
            if (owner is not None and run == _run_of(owner)) or run in seen:
                continue
            seen.add(run)
            kind = str(session.get("for"))
            if end is None:
                how = ("results after its completion line (a later run of it was cut short)"
                       if kind in ended else "no completion line")
            else:
                how = "another run's session line came before its completion line"
            killed.append((line.line, run, unfinished(kind, session, how)))
        announced = {str(s.get("for")) for s in sessions}
        for kind in dict.fromkeys(e.kind for e in segment if _is_result(e)):
            if kind in announced:
                continue
            if end is not None:
                how = "results with no session line of their own"
            elif kind in ended:
                how = "results after its completion line (a later run of it was cut short)"
            else:
                how = "no completion line"
            said.append(unfinished(kind, None, how))
        if end is None:
            return
        kind = str(end.record.get("for"))
        ended.add(kind)
        count = len(held.get(kind, ()))
        if owner is None and not sessions and not segment:
            said.append(f"{path}: line {end.line}: a completion line of {kind} with no run "
                        f"of its own before it; {_AGAIN}")
        elif end.record.get("results") != count:
            said.append(f"{path}: {_who(kind, owner)}: its completion line counts "
                        f"{end.record.get('results')!r} results but the file holds {count} "
                        f"before it, so results are missing or were added; {_AGAIN}")

    for entry in sound:
        if entry.kind == END_KIND:
            close(entry)
            segment = []
            continue
        segment.append(entry)
        if _is_result(entry):
            held.setdefault(entry.kind, set()).add(str(entry.record["key"]))
    if segment:
        close(None)
    # a killed run that the same shard, run again with the same command, later finished
    # is done: the later run did its whole share (only unchanged files' results were kept)
    said += [why for at, run, why in killed
             if not any(then > at and done == run for then, done in finished)]
    return said


def _is_result(entry: journal.JournalEntry) -> bool:
    """Whether a line is one file's result (not a session or completion line)."""
    return entry.kind not in (SESSION_KIND, END_KIND) and "key" in entry.record \
        and "result" in entry.record


def _slice(session: Mapping[str, Any]) -> JobSlice | None:
    """The slice a session line names; None when it names none (`coverage_problems` says so)."""
    try:
        return parse_job_slice(str(session.get("shard")))
    except ValueError:
        return None


def _unowned(keys: list[str], sessions: list[Mapping[str, Any]]) -> list[str]:
    """The keys none of a results file's own shards owns (a shard only records its own)."""
    shards = [_slice(session) for session in sessions]
    if not shards or None in shards:
        return []
    return [key for key in dict.fromkeys(keys) if not any(s.owns(key) for s in shards if s)]


def coverage_problems(batch: BatchResults) -> list[str]:
    """What a batch's results files leave unchecked, each in one line: a file that names no
    job, a run whose completion line names errors of its whole share, and for each kind of
    result (scan, verify, report), every slice `I/N` that no results file holds for an N its
    session lines name (a shard's own command line differs from the others' in its output
    names, so slices are matched by kind, not command)."""
    problems = [f"{path}: results but no session line, so no job or slice is named (a job "
                "killed before its end writes none: run it again with the same results file)"
                for path in batch.unannounced]
    problems += [f"{path}: a result for {key}, which none of that file's shards owns, so "
                 "it is not that shard's record" for path, key in batch.strays[:_NAMED]]
    if len(batch.strays) > _NAMED:
        problems.append(f"and {len(batch.strays) - _NAMED} more results outside their shards")
    problems += [f"{path}: a result for {key} made for a job (manifest, options, version) "
                 "that none of that file's runs ran, so it is not their record" for path, key in
                 batch.jobless[:_NAMED]]
    if len(batch.jobless) > _NAMED:
        problems.append(f"and {len(batch.jobless) - _NAMED} more results of no run's job")
    problems += batch.unfinished
    held: dict[str, set[JobSlice]] = {}
    for session in batch.sessions:
        part = _slice(session)
        if part is None:
            problems.append(f"a session line names the slice {str(session.get('shard'))!r}, "
                            "not I/N")
            continue
        held.setdefault(str(session.get("for")).partition(".")[0], set()).add(part)
    for kind, parts in sorted(held.items()):
        for n in sorted({p.count for p in parts}):
            problems += [f"{kind} --shard {i}/{n}: no results file holds it, so its files were "
                         "never checked; merge every shard's results file"
                         for i in range(n) if JobSlice(i, n) not in parts]
    return problems


def _job_command(session: Mapping[str, Any]) -> str:
    """A session line's command with what differs between shards of one job left out: a
    report shard's own report file (`-o`); `--shard` and `--results` are never in it."""
    command = str(session.get("command"))
    if session.get("for") != "report.file":
        return command
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    kept = [w for i, w in enumerate(words)
            if w not in ("-o", "--output") and (i == 0 or words[i - 1] not in ("-o", "--output"))]
    return shlex.join(kept)


def command_clash(batch: BatchResults) -> str | None:
    """One line naming two results files whose sessions are slices `I/N` of the same kind
    and the same N but of different commands (other paths, another manifest) or jobs (the
    manifest's content, the options: `Job`): together they are no partition of one job's
    files, so a file one of them left out may be in no other's share; None when every split
    is of one job."""
    first: dict[tuple[str, int], tuple[Path | str, str, str | None]] = {}
    bound: dict[tuple[str, int], tuple[Path | str, Mapping[str, Any]]] = {}  # first with a job
    named = batch.session_files or ("?",) * len(batch.sessions)
    for path, session in zip(named, batch.sessions, strict=True):
        part = _slice(session)
        if part is None:
            continue  # coverage_problems names it
        group = (str(session.get("for")), part.count)
        command = _job_command(session)
        cwd = session.get("cwd")
        cwd = str(cwd) if cwd is not None else None
        seen = first.setdefault(group, (path, command, cwd))
        if session.get("job") is not None:
            bound.setdefault(group, (path, session))
        if seen[1] != command:
            return (f"{seen[0]} and {path} hold shards of N={part.count} of different "
                    f"commands ({shlex.quote(seen[1])} and {shlex.quote(command)}): together "
                    "they do not cover either command's files; merge the results of one "
                    "command run as every --shard I/N, with the same paths and options")
        other, job = bound.get(group, (path, session))
        if session.get("job") is not None and job.get("job") != session.get("job"):
            held = f"{path} holds" if other == path else f"{other} and {path} hold"
            return (f"{held} runs of {shlex.quote(command)} (N={part.count}) against "
                    f"different manifests, options or versions ({_job_said(job)} and "
                    f"{_job_said(session)}): their results check other things; merge the "
                    "results of one job (a manifest changed since a results file was begun: "
                    "start a new results file for it)")
        if None not in (seen[2], cwd) and seen[2] != cwd and _relative(command):
            return (f"{seen[0]} and {path} hold shards of N={part.count} of the command "
                    f"{shlex.quote(command)} run in different working folders "
                    f"({shlex.quote(str(seen[2]))} and {shlex.quote(str(cwd))}), so its "
                    "relative paths name other files in each: together they do not cover "
                    "either folder's files; run every --shard I/N in one folder (or give "
                    "absolute paths)")
    return None


def _job_said(session: Mapping[str, Any]) -> str:
    """'manifest sha256 1a2b3c4d5e6f…, options {...}, version 0.1.0' of a session line's
    job (a version that recorded none: 'version not recorded')."""
    digest = session.get("manifest_sha256")
    manifest = f"manifest sha256 {str(digest)[:12]}…" if digest else "no manifest"
    version = session.get("version")
    made_by = f"version {version}" if version is not None else "version not recorded"
    return (f"{manifest}, options {json.dumps(session.get('options'), sort_keys=True)}, "
            f"{made_by}")


def unbound_runs(batch: BatchResults) -> list[Path]:
    """The results files holding a session line that names no job (an earlier version's):
    their shards are compared by command text alone, and a result kept across a changed
    manifest cannot be told apart."""
    return list(dict.fromkeys(path for path, session in zip(batch.session_files,
                                                            batch.sessions, strict=True)
                              if session.get("job") is None))


def _relative(command: str) -> bool:
    """Whether a session's command has a word that could be a relative path (neither an
    option, absolute, nor a URL): what it names then depends on the working folder. A
    session line written before sessions noted their folder (`cwd`) is compared by its
    command text alone."""
    try:
        words = shlex.split(command)[2:]  # past `ckpt-inspector COMMAND`
    except ValueError:
        return True
    return any(not w.startswith(("-", "/")) and "://" not in w for w in words)


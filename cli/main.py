"""The ``toolgym`` command line: one subcommand per job, each in its own module.

Subcommand modules are imported lazily so ``toolgym envs`` does not pay for torch.
Each module exposes ``add_arguments(parser)`` and ``run(args) -> int``.

Errors. Bad input ends in exit status 2 and one line on stderr (``toolgym CMD: error: ...``),
never a traceback; the rule is by exception type (:func:`is_user_error`): a bad command line,
``ValueError`` (and its subclasses: JSON/Unicode errors, ``UnknownConfigKeyError``,
``UnknownEnvIdError``), ``OSError`` (missing, unreadable or misplaced files), gymnasium's,
omegaconf's and YAML's errors. Every other exception (``KeyError``, ``TypeError``,
``AttributeError``, ``IndexError``, ``RuntimeError``...) is a bug in toolgym and keeps its
traceback: a lookup of a user-given name that can fail (an env id, a reward, a dataset) raises a
``ValueError`` with a message instead. ``TOOLGYM_DEBUG=1`` shows the traceback of user errors too.
Ctrl-C prints one line (``toolgym CMD: interrupted``) and exits 130.
Outputs are checked before any work (:func:`check_output_file`, :func:`check_output_dir`), so a
misplaced ``--json`` fails in a second, not after a whole evaluation.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("toolgym.cli.eval", "evaluate a retriever, an agent or a policy on a dataset"),
    "envs": ("toolgym.cli.envs", "list the registered environment ids"),
    "generate": ("toolgym.cli.generate", "generate MagicSelector-style multi-turn dialogues from a YAML config"),
    "replay": ("toolgym.cli.replay", "re-score saved rollouts under several reward schemes"),
    "train": ("toolgym.cli.train", "train a policy with local GRPO from a YAML config"),
    "export-verl": ("toolgym.cli.export_verl", "write an env's tasks as the parquet dataset verl reads"),
    "export-hf": ("toolgym.cli.export_hf", "write an env's tasks and corpus as a Hugging Face datasets folder (parquet + card)"),
    "fit-retriever": ("toolgym.cli.fit_retriever", "fine-tune the MiniLM bi-encoder (InfoNCE + mined hard negatives)"),
    "fit-reranker": ("toolgym.cli.fit_reranker", "train the cross-encoder reranker: point-wise, list-wise, self-distilled"),
    "fit-preference": ("toolgym.cli.fit_preference", "train the decomposition preference scorer s(x, y) on UltraTool pairs"),
    "demos": ("toolgym.cli.demos", "record scripted demonstration episodes (rejection-sampled) as JSONL"),
    "sft": ("toolgym.cli.sft", "supervised warm start on demonstration episodes from a YAML config"),
}
# Subcommands whose extra arguments are omegaconf key=value overrides.
TAKES_OVERRIDES = ("train", "sft", "generate", "fit-retriever", "fit-reranker", "fit-preference")
# Library modules whose exceptions describe bad input (config syntax, env ids), not toolgym bugs.
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C
RESUMABLE = frozenset({"train", "sft"})  # commands whose run folder a --resume continues
USER_ERROR_MODULES = ("gymnasium.error", "omegaconf.errors", "yaml.error")
MAX_MESSAGE_CHARS = 1000


class CommandLineError(ValueError):
    """A malformed command line (argparse's errors, raised instead of exiting)."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`CommandLineError` instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CommandLineError(f"{message} (see `{self.prog} --help`)")


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` reports bad input (one line, exit 2) rather than a bug (traceback). A bare
    ``KeyError`` is a bug: user-given names are looked up with a ``ValueError`` on failure."""
    if isinstance(exc, (ValueError, OSError)):
        return True
    return any(cls.__module__ in USER_ERROR_MODULES for cls in type(exc).__mro__)


def one_line(exc: BaseException) -> str:
    """The exception's message on one line, capped (some libraries write paragraphs)."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) else str(exc)
    text = " ".join(text.split()) or type(exc).__name__
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def check_output_file(path: str | Path | None, flag: str) -> None:
    """Fail now if ``path`` cannot become a regular file: it is a folder, a parent is a file, or
    something other than a regular file is there (a device node such as ``/dev/full``, a FIFO,
    a socket, a symbolic link: refused, never replaced nor followed)."""
    from toolgym.data.readers import non_regular_kind

    if path is None:
        return
    p = Path(path)
    if str(path).endswith(("/", os.sep)) or p.is_dir():
        raise ValueError(f"{flag} {path}: is a folder; give a file path")
    kind = non_regular_kind(p)
    if kind is not None:
        raise ValueError(f"{flag} {path}: is a {kind}, not a regular file; give a regular file path")
    _check_parents(p, flag)


def check_output_dir(path: str | Path | None, flag: str) -> None:
    """Fail now if ``path`` cannot become a folder: it is a file, or a parent is a file."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{flag} {path}: is a file; give a folder path")
    _check_parents(p, flag)


def _check_parents(p: Path, flag: str) -> None:
    """The nearest existing ancestor must be a writable folder (missing ones are created later)."""
    parent = next((a for a in p.absolute().parents if a.exists()), None)
    if parent is None:
        return
    if not parent.is_dir():
        raise ValueError(f"{flag} {p}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {p}: cannot write in {parent}")


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, str | None]:
    """The parser with the chosen command's arguments; a command module may also define
    ``normalize_argv(argv)`` (older spellings), applied by :func:`main` before parsing."""
    parser = OneLineArgumentParser(prog="toolgym", description="RL environments for agentic tool search",
                                   epilog="--verbose (anywhere, or TOOLGYM_VERBOSE=1) keeps the libraries' progress "
                                          "bars and messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the chosen command's module is imported
            importlib.import_module(module).add_arguments(p)
    return parser, chosen


def main(argv: list[str] | None = None) -> int:
    """``toolgym [--verbose] COMMAND ...``: ``--verbose`` (anywhere; or ``TOOLGYM_VERBOSE=1``) keeps
    the libraries' progress bars and messages, which are otherwise silenced (:mod:`toolgym.trainers.console`)."""
    from toolgym.trainers.console import VERBOSE_ENV, quiet_libraries, verbose

    argv = list(sys.argv[1:] if argv is None else argv)
    loud = "--verbose" in argv or verbose()
    argv = [a for a in argv if a != "--verbose"]
    before = os.environ.get(VERBOSE_ENV)
    if loud:
        os.environ[VERBOSE_ENV] = "1"  # commands and their subprocesses ask console.verbose()
    try:
        with quiet_libraries(not loud):
            return _main(argv)
    finally:
        if before is None:
            os.environ.pop(VERBOSE_ENV, None)
        else:
            os.environ[VERBOSE_ENV] = before


def stdout_is_broken() -> bool:
    """Whether standard output's reader has gone (the one broken pipe a command exits 0 on): the write end of
    a pipe whose reader closed polls as an error."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _main(argv: list[str]) -> int:
    parser, chosen = build_parser(argv)
    if chosen is None or chosen not in SUBCOMMANDS:
        if chosen is not None:
            print(f"toolgym: error: unknown command {chosen!r}; choose one of {sorted(SUBCOMMANDS)}", file=sys.stderr)
            return 2
        parser.print_help()
        return 0
    try:
        normalize = getattr(importlib.import_module(SUBCOMMANDS[chosen][0]), "normalize_argv", None)
        if normalize is not None:
            argv = normalize(argv)
        args, extra = parser.parse_known_args(argv)
        args.overrides = extra  # key=value config overrides of the commands that take a config
        if extra and chosen not in TAKES_OVERRIDES:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        module = importlib.import_module(SUBCOMMANDS[chosen][0])
        return int(module.run(args) or 0)
    except BrokenPipeError:  # `toolgym envs | head`: the reader left; say nothing, as a shell tool does
        if not stdout_is_broken():  # another pipe broke (a worker, a socket): an error, never a silent exit 0
            raise
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit-time flush fails too
        except (OSError, ValueError):
            pass
        return 0
    except Exception as exc:
        if not is_user_error(exc) or os.environ.get("TOOLGYM_DEBUG"):
            raise
        print(f"toolgym {chosen}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's 128 + SIGINT, not a 40-line traceback
        if os.environ.get("TOOLGYM_DEBUG"):
            raise
        hint = " (continue with --resume)" if chosen in RESUMABLE else ""
        print(f"toolgym {chosen}: interrupted{hint}", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

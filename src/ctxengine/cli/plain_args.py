"""A plain command line, parsed without the command-line framework: the fast paths of
``ctxengine tool grep|glob`` (``cli.launch``) and of ``ctxengine replay`` (``cli.launch_replay``)
share this one parser, each with its own table of options."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Convert", "digits", "parse_plain"]

Convert = Callable[[str], object]  # an option's text -> its value, or None: not a plain value


def digits(text: str) -> int | None:
    """``text`` as an integer when it is plain ASCII digits, else None."""
    return int(text) if text.isascii() and text.isdigit() else None


def parse_plain(
    args: list[str],
    options: dict[str, tuple[str, Convert | None]],
    positional: tuple[str, Convert],
    *,
    dash_is_positional: bool = False,
) -> dict[str, object] | None:
    """The fields of a plain command line, or None when it is anything else (the full command line
    parses and reports it). ``options``: option (``--name`` or ``-x``) -> (its field, the converter
    of its value; None for a flag); ``positional``: the field of the one positional argument and
    its converter (``-`` is one with ``dash_is_positional``). Plain: each option at most once, a
    value given as ``--name=V`` or as the next argument, every converter's answer not None, the
    positional argument present once; help, ``--`` and unknown options are not plain."""
    fields: dict[str, object] = {}
    field_of_positional, convert_positional = positional
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not arg.startswith("-") or (dash_is_positional and arg == "-"):
            value = convert_positional(arg)
            if field_of_positional in fields or value is None:
                return None
            fields[field_of_positional] = value
        elif name in options:
            field, convert = options[name]
            if field in fields or (eq and convert is None):
                return None
            if convert is None:
                fields[field] = True
            else:
                if not eq:
                    i += 1
                    if i == len(args):
                        return None
                    inline = args[i]
                value = convert(inline)
                if value is None:
                    return None
                fields[field] = value
        else:
            return None
        i += 1
    return fields if field_of_positional in fields else None

"""docs/settings.md, generated from the settings models themselves.

Every service loads one ``ServiceSettings`` subclass; each of its fields is a section
(``[kafka]``, ``[ingest]`` ...) whose fields are the settings. The classes are found by
reading the package's source (a class whose base is ``ServiceSettings`` or one of the
classes found so far), so a new service's settings appear here without editing this file.
For each setting the page gives the environment variable, the file key, the type with its
bounds, the default and the description written on the field. Secrets' defaults are never
printed.

    python -m tools.settings_doc --write    # rewrite docs/settings.md
    python -m tools.settings_doc --check    # exit 1 when docs/settings.md is stale
    python -m tools.settings_doc            # print the page

``tests/unit/anchorwatch/test_settings.py`` compares the whole file with what this writes.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import pkgutil
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, SecretBytes, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "settings.md"
BASE_CLASS = "ServiceSettings"
HIDDEN_DEFAULT = "*secret: never shown*"


class SettingsDocError(Exception):
    """The models cannot be documented as they are; the message says what to add."""


# --------------------------------------------------------------------------- discovery


def _module_sources(package: str) -> Iterator[tuple[str, Path]]:
    """(module name, source file) of every module in ``package``, without importing them."""
    root = importlib.import_module(package)
    yield package, Path(str(root.__file__))
    # walk_packages imports subpackages (their __init__ only) to find their modules.
    for info in pkgutil.walk_packages(root.__path__, package + ".", onerror=lambda _: None):
        spec = importlib.util.find_spec(info.name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            yield info.name, Path(spec.origin)


# A class statement and its bases (which may span lines); reading the text is ten times
# faster than parsing every module, and a class hidden from this pattern is not a service's.
_CLASS = re.compile(r"^[ \t]*class[ \t]+(\w+)[ \t]*\(([^)]*)\)[ \t]*:", re.MULTILINE)


def _base_names(bases: str) -> set[str]:
    names = set()
    for base in bases.split(","):
        base = base.strip()
        if base and "=" not in base:
            names.add(base.split("[")[0].rsplit(".", 1)[-1].strip())
    return names


def find_settings_classes(
    modules: Iterable[tuple[str, Path]], base: str = BASE_CLASS
) -> list[tuple[str, str]]:
    """(module, class name) of every class deriving from ``base``, directly or through
    classes found here, read from the source (nothing is imported)."""
    classes: list[tuple[str, str, set[str]]] = []
    for module, path in modules:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for match in _CLASS.finditer(text):
            classes.append((module, match[1], _base_names(match[2])))
    known = {base}
    found: set[tuple[str, str]] = set()
    grew = True
    while grew:
        grew = False
        for module, name, bases in classes:
            if (module, name) not in found and bases & known:
                found.add((module, name))
                known.add(name)
                grew = True
    return sorted(found)


def settings_classes(package: str = "anchorwatch") -> list[type[BaseModel]]:
    """Every service's settings class in ``package``, as the services import them."""
    from anchorwatch.settings import ServiceSettings

    # One module may be reachable under two names (the package's symlinked directories).
    sources: dict[Path, tuple[str, Path]] = {}
    for module, path in _module_sources(package):
        sources.setdefault(path.resolve(), (module, path))
    result: list[type[BaseModel]] = []
    seen: set[int] = set()
    for module, name in find_settings_classes(sources.values()):
        cls = getattr(importlib.import_module(module), name, None)
        if (
            isinstance(cls, type)
            and issubclass(cls, ServiceSettings)
            and cls is not ServiceSettings
            and id(cls) not in seen
        ):
            seen.add(id(cls))
            result.append(cls)
    return sorted(result, key=lambda c: (c.__module__, c.__qualname__))


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class Row:
    env: str  # "" for a field that exists only inside a list's JSON
    key: str
    type: str
    default: str
    description: str


@dataclass
class SectionDoc:
    name: str
    model: type[BaseModel]
    readers: list[str] = field(default_factory=list)


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _is_secret(annotation: Any) -> bool:
    inner, _ = _unwrap_optional(annotation)
    if isinstance(inner, type) and issubclass(inner, (SecretStr, SecretBytes)):
        return True
    return any(_is_secret(a) for a in typing.get_args(inner))


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds, and whether it holds a list of them."""
    inner, _ = _unwrap_optional(annotation)
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return inner, False
    if typing.get_origin(inner) in (list, tuple, Sequence):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel):
            return args[0], True
    return None, False


_NAMES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    Path: "path",
    SecretStr: "secret",
    SecretBytes: "secret",
}


def _type_name(annotation: Any, plural: bool = False) -> str:
    inner, optional = _unwrap_optional(annotation)
    origin = typing.get_origin(inner)
    if origin is Literal:
        text = ("any of " if plural else "one of ") + ", ".join(
            f"`{a}`" for a in typing.get_args(inner)
        )
    elif origin in (list, tuple, Sequence, set, frozenset):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        text = "list of " + (_type_name(args[0], plural=True) if args else "values")
    elif origin is dict:
        key, value = typing.get_args(inner)
        text = f"mapping of {_type_name(key)} to {_type_name(value)}"
    elif isinstance(inner, type) and issubclass(inner, BaseModel):
        text = "tables" if plural else "table"
    elif isinstance(inner, type) and inner in _NAMES:
        text = _NAMES[inner] + ("s" if plural else "")
    else:
        text = getattr(inner, "__name__", str(inner))
    return f"{text}, optional" if optional else text


def _bounds(info: FieldInfo) -> list[str]:
    inner, _ = _unwrap_optional(info.annotation)
    unit = "characters" if inner is str else "items"
    out = []
    for meta in info.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(meta, attr, None)
            if value is not None and isinstance(meta, annotated_types.BaseMetadata):
                out.append(f"{sign} {_number(value)}")
        if isinstance(meta, annotated_types.MinLen) and meta.min_length == 1:
            out.append("not empty")
        elif isinstance(meta, annotated_types.MinLen) and meta.min_length > 1:
            out.append(f"at least {meta.min_length} {unit}")
        if isinstance(meta, annotated_types.MaxLen):
            out.append(f"at most {meta.max_length} {unit}")
        pattern = getattr(meta, "pattern", None)
        if isinstance(pattern, str):
            out.append(f"matches `{pattern}`")
    return out


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def _default_value(info: FieldInfo, where: str) -> Any:
    factory = info.default_factory
    if factory is None:
        return info.default
    doc = getattr(factory, "__doc__", None)
    if isinstance(factory, types.FunctionType) and factory.__name__ != "<lambda>" and doc:
        # A factory that depends on the machine says in its docstring what it returns.
        return _Described(doc.strip().splitlines()[0])
    return typing.cast(Callable[[], Any], factory)()


@dataclass(frozen=True)
class _Described:
    text: str


def _size(value: int, unit: str) -> str | None:
    if unit == "bytes" and value >= 1024 and value % 1024 == 0:
        for name, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value % size == 0:
                return f"{value // size} {name}"
    if unit == "s" and value >= 3600 and value % 3600 == 0:
        hours = value // 3600
        return f"{hours // 24} days" if hours % 24 == 0 and hours >= 48 else f"{hours} h"
    return None


def _render_default(value: Any, name: str, where: str) -> str:
    if isinstance(value, _Described):
        return value.text
    if value is None or value is PydanticUndefined:
        return "unset" if value is None else "required"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (int, float)):
        text = f"`{value}`"
        unit = "bytes" if name.endswith("_bytes") else "s" if name.endswith("_s") else ""
        extra = _size(int(value), unit) if float(value).is_integer() else None
        return f"{text} ({extra})" if extra else text
    if isinstance(value, Path):
        text = str(value)
    elif isinstance(value, str):
        text = value if value else '""'
    else:
        text = json.dumps(_plain(value), ensure_ascii=False)
    for machine in {str(Path.home()), os.getcwd()} - {"/"}:
        if machine in text:
            raise SettingsDocError(
                f"{where}: the default {text!r} depends on this machine; give its "
                "default_factory a docstring whose first line says what it returns"
            )
    return f"`{text}`"


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


#: The longest table cell the docs allow (tools/check_house.py): a longer description goes
#: under its table, named by its file key or option, and the cell says so.
MAX_CELL = 200
BELOW = "(below the table)"


def _description(text: str, name: str, below: list[str]) -> str:
    """The description's cell, or BELOW with the text kept for under the table."""
    cell = _cell(text)
    if len(cell) + 2 <= MAX_CELL:
        return cell
    below.append(f"- `{name}`: {' '.join(text.split())}")
    return BELOW


def _with_below(out: list[str], below: list[str]) -> None:
    if below:
        out.append("")
        out.extend(below)


def _rows(model: type[BaseModel], env: str, key: str, in_list: bool = False) -> Iterator[Row]:
    """The rows of ``model``'s fields; ``env``/``key`` name the model itself."""
    for name, info in model.model_fields.items():
        if info.validation_alias is not None or info.alias is not None:
            raise SettingsDocError(f"{model.__name__}.{name}: aliases are not documented yet")
        where = f"{model.__module__}.{model.__qualname__}.{name}"
        description = (info.description or "").strip()
        if not description:
            raise SettingsDocError(f"{where}: no description; say what the setting does")
        field_env = "" if in_list else f"{env}__{name.upper()}"
        field_key = f"{key}{name}" if key.endswith(("] ", ".")) else f"{key}.{name}"
        sub, is_list = _model_in(info.annotation)
        if sub is not None and not is_list:
            yield from _rows(sub, field_env, field_key, in_list)
            continue
        secret = _is_secret(info.annotation)
        default = (
            HIDDEN_DEFAULT if secret else _render_default(_default_value(info, where), name, where)
        )
        type_text = _type_name(info.annotation)
        bounds = _bounds(info)
        if bounds:
            type_text += ", " + ", ".join(bounds)
        if not in_list and (is_list or _needs_json(info.annotation)):
            type_text += " (JSON in the environment)"
        yield Row(field_env, field_key, type_text, default, description)
        if sub is not None and is_list:
            yield from _rows(sub, "", f"{field_key}[].", in_list=True)


def _needs_json(annotation: Any) -> bool:
    inner, _ = _unwrap_optional(annotation)
    return typing.get_origin(inner) in (list, tuple, dict, set, frozenset, Sequence)


def sections(classes: Sequence[type[BaseModel]]) -> list[SectionDoc]:
    """Each section once, in the order the classes list them, with the classes reading it."""
    docs: dict[str, SectionDoc] = {}
    for cls in classes:
        for name, info in cls.model_fields.items():
            sub, is_list = _model_in(info.annotation)
            if sub is None or is_list:
                raise SettingsDocError(
                    f"{cls.__name__}.{name}: settings at the top level are not documented "
                    "yet; put them in a section"
                )
            doc = docs.setdefault(name, SectionDoc(name, sub))
            if doc.model is not sub:
                raise SettingsDocError(
                    f"[{name}] is {doc.model.__name__} in {doc.readers[0]} but "
                    f"{sub.__name__} in {cls.__name__}: one section, one meaning"
                )
            doc.readers.append(cls.__name__)
    return list(docs.values())


# --------------------------------------------------------------------------- the page


INTRO = """\
# Settings

<!-- Generated from the settings models by `python -m tools.settings_doc --write`; do not
edit by hand. tests/unit/anchorwatch/test_settings.py fails when this file differs from what
the tool writes. -->

Every command reads one settings object from environment variables and an optional TOML file
(`--config FILE` or `ANCHORWATCH_CONFIG`), validated when it starts; an error names the
variable and the file key. Precedence: command-line options > environment > file > defaults.
`ANCHORWATCH_<SECTION>__<FIELD>` in the environment is `field` under `[section]` in the file;
lists and mappings are JSON in the environment. One file can serve every service: each reads
its own sections and ignores the others. `anchorwatch settings` prints the same list.

```toml
[kafka]
bootstrap_servers = "kafka-1:9092,kafka-2:9092"
client_properties = { "security.protocol" = "SASL_SSL", "sasl.mechanism" = "SCRAM-SHA-512" }

[topics]
partitions = 12

[[policy.rules]]
name = "drift"
```

Secrets (tokens, webhook URLs) can come from a file named by the matching `*_file` setting;
they print as `**********`, are never logged, and their defaults are not shown here.
"""


def _command_line_rows() -> list[tuple[str, str, str]]:
    """(variable, option, help) of the command line's own options read from the environment."""
    import click

    from anchorwatch.cli import cli

    rows = []

    def walk(command: click.Command, path: str) -> None:
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.envvar, str):
                option = max(param.opts, key=len)
                rows.append((param.envvar, f"{path} {option}", param.help or ""))
        if isinstance(command, click.Group):
            for name in sorted(command.commands):
                walk(command.commands[name], f"{path} {name}")

    walk(cli, "anchorwatch")
    return sorted(set(rows))


def render(classes: Sequence[type[BaseModel]] | None = None) -> str:
    classes = settings_classes() if classes is None else classes
    docs = sections(classes)
    out = [INTRO]
    out.append("## Who reads what\n")
    out.append("| settings class | module | sections |")
    out.append("|---|---|---|")
    for cls in classes:
        names = ", ".join(f"`[{n}]`" for n in cls.model_fields)
        out.append(f"| `{cls.__name__}` | `{cls.__module__}` | {names} |")
    out.append("")
    command_line = _command_line_rows()
    if command_line:
        out.append("## The command line\n")
        out.append("| environment variable | option | description |")
        out.append("|---|---|---|")
        below: list[str] = []
        for env, option, text in command_line:
            out.append(f"| `{env}` | `{option}` | {_description(text, option, below)} |")
        _with_below(out, below)
        out.append("")
    for doc in docs:
        prefix = f"ANCHORWATCH_{doc.name.upper()}"
        out.append(f"## [{doc.name}]\n")
        summary = (doc.model.__doc__ or "").strip()
        if summary and doc.model.__doc__ is not BaseModel.__doc__:
            out.append(" ".join(summary.split()) + "\n")
        out.append(f"Read by {', '.join(f'`{r}`' for r in doc.readers)}.\n")
        out.append("| environment variable | file key | type | default | description |")
        out.append("|---|---|---|---|---|")
        below = []
        for row in _rows(doc.model, prefix, f"[{doc.name}] "):
            env = f"`{row.env}`" if row.env else "(in the list's JSON)"
            description = _description(row.description, row.key, below)
            out.append(
                f"| {env} | `{_cell(row.key)}` | {_cell(row.type)} | {_cell(row.default)} "
                f"| {description} |"
            )
        _with_below(out, below)
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite {DOC.relative_to(ROOT)}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)}")
    elif args.check:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC.relative_to(ROOT)} is stale: python -m tools.settings_doc --write")
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

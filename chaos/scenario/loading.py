"""Loading a scenario: a TOML file and ``--set`` overrides in, a validated ``Scenario`` out.

Every error names the file, the field and the offending value, one problem a line, and exits
with code 2 (bad input).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from chaos.scenario.faults import ALL_FAULT_PARAMETERS, FAULT_KINDS
from chaos.scenario.model import Scenario


class ScenarioError(Exception):
    """Bad scenario input: the message names file, field and value."""


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """``a.b.0.c=value`` → (path, value); the value is read as TOML, else kept as a string."""
    if "=" not in assignment:
        raise ScenarioError(
            f"--set {assignment!r}: expected key=value, e.g. topology.lease_ms=2000"
        )
    key, raw = assignment.split("=", 1)
    path = [part for part in key.strip().split(".") if part]
    if not path:
        raise ScenarioError(f"--set {assignment!r}: empty key")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        value = raw
    return path, value


def apply_override(data: dict[str, Any], path: list[str], value: Any, label: str) -> None:
    node: Any = data
    for depth, part in enumerate(path[:-1]):
        if isinstance(node, list):
            node = node[_list_index(node, part, label)]
        else:
            node = node.setdefault(part, {})
        if not isinstance(node, dict | list):
            raise ScenarioError(f"{label}: {'.'.join(path[: depth + 1])} is not a table")
    last = path[-1]
    if isinstance(node, list):
        node[_list_index(node, last, label)] = value
    else:
        node[last] = value


def _list_index(items: list[Any], part: str, label: str) -> int:
    if not (part.isascii() and part.isdigit()) or int(part) >= len(items):
        raise ScenarioError(f"{label}: {part!r} is not an index of a list of {len(items)}")
    return int(part)


def _location_part(part: int | str) -> str:
    """A field name as written; a key that is no plain name (spaces, control characters, a line
    break of its own) quoted, so each error stays on one line."""
    text = str(part)
    return text if text and all(c.isascii() and (c.isalnum() or c in "_-") for c in text) \
        else repr(text)


def _error_line(item: ErrorDetails) -> str:
    location: list[int | str] = list(item["loc"])
    message = item["msg"].removeprefix("Value error, ")
    value = item.get("input")
    shown = "" if isinstance(value, dict) else f" = {value!r}"
    if item["type"] == "extra_forbidden":
        message = "unknown key"
    if location[:1] == ["faults"] and len(location) >= 2:
        location, message, shown = _fault_error(item, location, message, shown)
    return f"  {'.'.join(_location_part(part) for part in location) or '(top level)'}" \
           f"{shown}: {message}"


def _fault_error(item: ErrorDetails, location: list[int | str], message: str,
                 shown: str) -> tuple[list[int | str], str, str]:
    """A fault's errors in the words of its kind. Pydantic reports them through the union: an
    unknown ``kind`` at the fault itself, the rest under the kind's tag (``faults.0.latency.x``),
    which the scenario file does not have."""
    value = item.get("input")
    if len(location) == 2 and item["type"] == "union_tag_invalid" and isinstance(value, dict):
        return ([*location, "kind"], f"not a fault kind; expected one of {', '.join(FAULT_KINDS)}",
                f" = {value.get('kind')!r}")
    if len(location) == 2 and item["type"] == "union_tag_not_found":
        return [*location, "kind"], f"a fault needs a kind: one of {', '.join(FAULT_KINDS)}", ""
    if len(location) == 2 and item["type"] == "model_attributes_type":
        return location, "a fault is a table: kind, target and the kind's parameters", shown
    if len(location) < 3 or location[2] not in FAULT_KINDS:
        return location, message, shown
    kind = str(location.pop(2))
    if len(location) != 3:  # inside a parameter (a target table, a toxic's attributes)
        return location, message, shown
    field = str(location[2])
    declaration = FAULT_KINDS[kind]
    if item["type"] == "extra_forbidden" and field in ALL_FAULT_PARAMETERS:
        takes = ", ".join(sorted(declaration.parameter_names())) or "none"
        message = f"not a parameter of a {kind} fault (it takes: {takes})"
    elif item["type"] == "missing":  # named by the fault, as the field is not there
        why = declaration.model_fields[field].description
        return location[:2], f"a {kind} fault needs {field}" + (f" ({why})" if why else ""), ""
    elif item["type"] == "literal_error":
        message = f"a {kind} fault takes {field} {item.get('ctx', {}).get('expected')}"
    return location, message, shown


def _format_errors(source: str, error: ValidationError) -> str:
    return "\n".join([f"{source}: invalid scenario", *map(_error_line, error.errors())])


def scenario_from_dict(data: dict[str, Any], source: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(_format_errors(source, error)) from None


def _sut_cwd_beside(data: dict[str, Any], path: Path) -> None:
    """``sut.cwd`` is relative to the scenario file (so a scenario and its SUT move together)."""
    sut = data.get("sut")
    if isinstance(sut, dict) and sut.get("workers") is not None:
        cwd = sut.get("cwd", ".")
        if isinstance(cwd, str) and not Path(cwd).is_absolute():
            sut["cwd"] = str((path.parent / cwd).resolve())


def read_scenario_file(path: str | Path) -> dict[str, Any]:
    """A scenario file's TOML as a table, not yet validated (errors name the file: exit 2)."""
    source = str(path)
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ScenarioError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(f"{source}: cannot read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(f"{source}: not valid TOML: {error}") from None
    except RecursionError:
        raise ScenarioError(f"{source}: not valid TOML: arrays or tables nested too deeply") \
            from None


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str) -> None:
    """``--set`` assignments applied to a scenario's table, in order."""
    for assignment in overrides:
        try:
            field_path, value = parse_override(assignment)
        except ScenarioError as error:
            raise ScenarioError(f"{source}: {error}") from None
        apply_override(data, field_path, value, f"{source}: --set {assignment}")


def validated(data: dict[str, Any], source: str) -> Scenario:
    """A scenario's table validated (``source`` names it in every error)."""
    try:
        return scenario_from_dict(data, source)
    except RecursionError:
        raise ScenarioError(f"{source}: invalid scenario: values nested too deeply") from None


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    data = read_scenario_file(path)
    apply_overrides(data, overrides or [], str(path))
    _sut_cwd_beside(data, Path(path))
    return validated(data, str(path))

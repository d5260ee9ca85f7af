"""Does each pin resolve for its platform? Asked of the package index, metadata only.

The index's JSON listing of a project (PEP 691) names every file of every release
with its requires-python and yanked state; a pin resolves when its exact version
has a wheel, not yanked, whose tags a CPython of the pin's version on the pin's
platform accepts (manylinux_2_34_x86_64 accepts manylinux_2_17 ... 2_34 wheels),
and whose requires-python admits that version. No wheel is downloaded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import httpx
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from harness.engines.install.pins import EnginePin
from harness.errors import SpecbenchError

_JSON = "application/vnd.pypi.simple.v1+json"
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
# The legacy aliases of manylinux_2_X (PEP 600).
_LEGACY = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


class IndexUnreachable(SpecbenchError):
    """The package index did not answer (no network): nothing could be checked."""


@dataclass
class PinCheck:
    pin: EnginePin
    wheel: str | None = None  # the file that resolves it
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.wheel is not None and not self.problems

    def line(self) -> str:
        target = f"CPython {self.pin.python} on {self.pin.platform}"
        if self.ok:
            return (
                f"ok    {self.pin.name}: {self.pin.requirement} resolves for {target}: {self.wheel}"
            )
        return f"FAIL  {self.pin.name}: {self.pin.requirement} for {target}: " + "; ".join(
            self.problems
        )


def default_index_url() -> str:
    """The index pip uses: PIP_INDEX_URL when set, else pip's own default."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].rstrip("/")
    from pip._internal.models.index import PyPI  # pip's default, not spelled out here

    return PyPI.simple_url.rstrip("/")


def platforms(platform: str) -> list[str]:
    """The platform tags a host of this tag accepts, most specific first."""
    m = _MANYLINUX.match(platform)
    if not m:
        return [platform]
    major, minor, arch = int(m.group(1)), int(m.group(2)), m.group(3)
    out = []
    for glibc in range(minor, 4, -1):
        out.append(f"manylinux_{major}_{glibc}_{arch}")
        if (major, glibc) in _LEGACY:
            out.append(f"{_LEGACY[(major, glibc)]}_{arch}")
    return out


def target_tags(python: str, platform: str) -> set[Tag]:
    version = tuple(int(x) for x in python.split("."))
    plats = platforms(platform)
    return set(cpython_tags(version, platforms=plats)) | set(
        compatible_tags(version, platforms=plats)
    )


def release_files(
    package: str, index_url: str | None = None, client: httpx.Client | None = None
) -> list[dict]:
    """The index's file entries for a project (PEP 691 JSON)."""
    url = f"{index_url or default_index_url()}/{canonicalize_name(package)}/"
    own = client is None
    client = client or httpx.Client(timeout=60, follow_redirects=True)
    try:
        response = client.get(url, headers={"Accept": _JSON})
    except httpx.TransportError as err:
        raise IndexUnreachable(f"the package index at {url} did not answer: {err}") from None
    finally:
        if own:
            client.close()
    if response.status_code == 404:
        return []
    if response.status_code != 200 or _JSON not in response.headers.get("content-type", ""):
        raise SpecbenchError(f"{url}: HTTP {response.status_code}, not a PEP 691 JSON listing")
    return list(response.json().get("files", []))


def check_pin(pin: EnginePin, files: list[dict]) -> PinCheck:
    """Judge one pin against its project's file entries."""
    result = PinCheck(pin)
    want = Version(pin.version)
    tags = target_tags(pin.python, pin.platform)
    same_version, yanked = [], []
    for entry in files:
        try:
            name, version, _, wheel_tags = parse_wheel_filename(entry["filename"])
        except (InvalidWheelFilename, InvalidVersion, KeyError):
            continue  # an sdist or a malformed name: only wheels count (binary only)
        if name != canonicalize_name(pin.package) or version != want:
            continue
        if entry.get("yanked"):
            yanked.append(entry["filename"])
            continue
        same_version.append(entry["filename"])
        if not (set(wheel_tags) & tags):
            continue
        spec = entry.get("requires-python")
        try:
            if spec and Version(pin.python + ".0") not in SpecifierSet(spec):
                result.problems.append(f"{entry['filename']} requires Python {spec}")
                continue
        except InvalidSpecifier:
            pass
        result.wheel = entry["filename"]
        result.problems = []
        return result
    if not same_version and not yanked:
        result.problems.append(f"the index has no wheel of {pin.package} {pin.version}")
    elif not same_version:
        result.problems.append(f"every wheel of {pin.version} is yanked: {', '.join(yanked)}")
    elif not result.problems:
        result.problems.append(
            "no wheel for this platform and Python among " + ", ".join(sorted(same_version))
        )
    return result


def check_pins(pins: list[EnginePin], index_url: str | None = None) -> list[PinCheck]:
    """Check every pin; raises IndexUnreachable when the index does not answer."""
    with httpx.Client(timeout=60, follow_redirects=True) as client:
        return [check_pin(p, release_files(p.package, index_url, client)) for p in pins]

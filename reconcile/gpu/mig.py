"""MIG layouts as mig-manager applies them, and the allocatable a node advertises after.

This module owns two tables and one question. The tables: the GPU Operator's default
mig-parted configuration (`data/mig_parted.json`, ported from NVIDIA/gpu-operator
`assets/state-mig-manager/0400_configmap.yaml`), and the GPU products GPU Feature Discovery
names, each with its PCI device id and its MIG profiles (`data/mig_products.json`; both files
name their sources). The question: given a node's labels after a change of
`nvidia.com/mig.config` and its allocatable now, what will the node advertise once
mig-manager has repartitioned its GPUs and the device plugin has re-registered? The answer
is a `Projected`, or a `MigProblem` saying in plain words why there is no answer (mig-parted
itself fails on a layout the GPU lacks without saying so: NVIDIA/mig-parted#18).

How a layout reaches a GPU follows mig-parted (`cmd/nvidia-mig-parted/assert/assert.go`,
`WalkSelectedMigConfigForEachGPU`): every entry of the layout is walked in order and applied
to each GPU its `device-filter` and `devices` match, so the last matching entry is the one a
GPU ends up with, and a GPU no entry matches is left as it is. What the device plugin then
advertises follows k8s-device-plugin `internal/rm/device_map.go`: strategy `none` (GFD writes
no `nvidia.com/mig.strategy` label then) counts every GPU as `nvidia.com/gpu`; `single`
counts MIG devices as `nvidia.com/gpu` and refuses a node whose GPUs are not all one profile;
`mixed` advertises `nvidia.com/mig-<profile>` (`+` written `.`) beside `nvidia.com/gpu` for
the GPUs left whole.

Everything here is pure and reads nothing but the packaged data, once.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any, Final

MIG_CONFIG: Final = "nvidia.com/mig.config"
MIG_STRATEGY: Final = "nvidia.com/mig.strategy"
MIG_CAPABLE: Final = "nvidia.com/mig.capable"
GPU_PRODUCT: Final = "nvidia.com/gpu.product"
GPU_COUNT: Final = "nvidia.com/gpu.count"
GPU_RESOURCE: Final = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
STRATEGIES: Final = ("none", "single", "mixed")

# What GFD appends to the sanitised product name (k8s-device-plugin internal/lm/resource.go,
# getProductName): `-MIG-<profile>` under strategy single, `-MIG-INVALID` when single is
# refused, `-SHARED` when a sharing config replicates the resource without renaming it.
_MIG_SUFFIX: Final = "-MIG-"
_SHARED_SUFFIX: Final = "-SHARED"
# Sharing writes `<resource>.replicas` per advertised resource (gpu, mig-<profile>).
_REPLICAS: Final = re.compile(r"nvidia\.com/(?:gpu|mig-[^/]+)\.replicas")
# mig-parted's profile grammar (go-nvlib parseMigProfile): [<c>c.]<g>g.<gb>gb, then one
# group of attributes after `+` (me, me.all, gfx) or `-` (me: without media extensions).
_PROFILE: Final = re.compile(
    r"(?:(?P<c>[0-9]+)c\.)?(?P<g>[0-9]+)g\.(?P<gb>[0-9]+)gb(?P<attrs>[+-][A-Za-z0-9.,]+)?"
)
_DATA: Final = "reconcile.gpu"
_LAYOUTS_FILE: Final = ("data", "mig_parted.json")
_PRODUCTS_FILE: Final = ("data", "mig_products.json")


class MigConfigError(ValueError):
    """A mig-parted configuration mig-parted would refuse; `problems` lists every one."""

    def __init__(self, source: str, problems: Iterable[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__(f"{source}: " + "; ".join(self.problems))


@dataclass(frozen=True)
class DeviceId:
    """A PCI device id as mig-parted's `device-filter` writes it: `0x<device><vendor>`,
    optionally `:0x<subsystem device><subsystem vendor>` (which then must match too)."""

    primary: int
    subsystem: int | None = None

    @classmethod
    def parse(cls, text: str) -> DeviceId:
        """The id in `text`; ValueError when it is not one (mig-parted uses strconv's base
        0: `0x20B210DE`, or decimal)."""
        parts = text.split(":")
        if len(parts) > 2:
            raise ValueError(f"invalid device id {text!r}: expected 0xDDDDVVVV[:0xSSSSVVVV]")
        primary, *subsystem = (int(part, 0) for part in parts)
        if not all(0 <= v <= 0xFFFFFFFF for v in (primary, *subsystem)):
            raise ValueError(f"invalid device id {text!r}: more than 32 bits")
        return cls(primary, subsystem[0] if subsystem else None)

    def __str__(self) -> str:
        text = f"0x{self.primary:08X}"
        return text if self.subsystem is None else f"{text}:0x{self.subsystem:08X}"


@dataclass(frozen=True)
class Profile:
    """A MIG profile name taken apart: `1g.10gb` is one of seven compute slices with 10 GB;
    `1c.2g.10gb` one compute slice of a two-slice GPU instance; `+me` media extensions."""

    compute: int
    slices: int
    memory_gb: int
    attributes: str  # "" or the suffix as written: "+me", "+me.all", "+gfx", "-me"

    @classmethod
    def parse(cls, text: str) -> Profile | None:
        match = _PROFILE.fullmatch(text)
        if match is None:
            return None
        slices = int(match["g"])
        compute = int(match["c"]) if match["c"] is not None else slices
        return cls(compute, slices, int(match["gb"]), match["attrs"] or "")

    @property
    def instance(self) -> str:
        """The GPU instance profile: the name without its compute-slice part."""
        return f"{self.slices}g.{self.memory_gb}gb{self.attributes}"

    @property
    def name(self) -> str:
        """The canonical name, as NVML and the device plugin spell it (`1c.1g.5gb` is
        `1g.5gb`)."""
        if self.compute == self.slices:
            return self.instance
        return f"{self.compute}c.{self.instance}"

    @property
    def resource(self) -> str:
        """The extended resource strategy mixed advertises it as (k8s-device-plugin
        internal/rm/rm.go: `mig-` + profile, `+` replaced by `.`)."""
        return MIG_RESOURCE_PREFIX + self.name.replace("+", ".")


@dataclass(frozen=True)
class Entry:
    """One item of a layout: which GPUs (`devices`: indexes, None for all), of which
    device ids (`device_filter`, empty for any), get MIG on or off and which instances."""

    devices: tuple[int, ...] | None
    device_filter: tuple[DeviceId, ...]
    mig_enabled: bool
    mig_devices: Mapping[str, int]  # canonical profile name -> instances per GPU (> 0)

    def applies(self, index: int, device: DeviceId | None) -> bool | None:
        """Whether mig-parted applies this entry to GPU `index` of id `device`; None when
        the labels cannot tell (the id is unknown, or the filter names a subsystem id)."""
        if self.devices is not None and index not in self.devices:
            return False
        if not self.device_filter:
            return True
        if device is None:
            return None
        primary = [f for f in self.device_filter if f.primary == device.primary]
        if not primary:
            return False
        return True if any(f.subsystem is None for f in primary) else None


@dataclass(frozen=True)
class Product:
    """A GPU as GFD labels it: its NVML name, PCI device id, and the MIG profiles one GPU
    offers (canonical name -> most instances), out of `compute_slices` sevenths (or
    quarters) of its SMs and `memory_slices` eighths (or quarters) of its memory."""

    label: str
    name: str
    device_id: DeviceId
    family: str
    profiles: Mapping[str, int]
    compute_slices: int
    memory_slices: int

    def refusal(self, mig_devices: Mapping[str, int]) -> str | None:
        """Why one GPU of this product cannot hold `mig_devices`, or None when it can as far
        as counts and slices go (where each instance sits is NVML's to decide)."""
        compute = memory = 0
        for name, count in mig_devices.items():
            profile = Profile.parse(name)
            most = self.profiles.get(profile.instance) if profile is not None else None
            if profile is None or most is None:
                return f"{name} is not one of its MIG profiles ({', '.join(self.profiles)})"
            if count > most:
                return f"it holds at most {most} x {name}, not {count}"
            compute += profile.slices * count
            memory += self._memory_slices(profile) * count
        if compute > self.compute_slices:
            return f"the instances need {compute} compute slices, it has {self.compute_slices}"
        if memory > self.memory_slices:
            return f"the instances need {memory} memory slices, it has {self.memory_slices}"
        return None

    def _memory_slices(self, profile: Profile) -> int:
        # A profile's memory in slices, from the sizes the names carry: the whole-GPU
        # profile's size is all of the memory (7g.80gb: 80 GB in 8; 1g.10gb is 1 of them).
        whole = max(p.memory_gb for p in map(Profile.parse, self.profiles) if p is not None)
        return max(1, round(profile.memory_gb * self.memory_slices / whole))


@dataclass(frozen=True)
class Gpu:
    """One GPU after the change: MIG on or off, and its instances (profile -> count)."""

    index: int
    mig_enabled: bool
    mig_devices: Mapping[str, int]


@dataclass(frozen=True)
class Projected:
    """The allocatable a node will have once mig-manager and the device plugin are done.

    `layout` is the `nvidia.com/mig.config` it follows (None when the node has none: then
    `allocatable` is the current one, unchanged, and `gpus` is empty). Resources other
    than `nvidia.com/gpu` and `nvidia.com/mig-*` are carried over as they were."""

    layout: str | None
    strategy: str
    allocatable: Mapping[str, str]
    gpus: tuple[Gpu, ...]


@dataclass(frozen=True)
class MigProblem:
    """Why a node's MIG projection has no answer, in words a user can act on: the layout,
    the product (base name, None when unlabelled), and the layouts that do exist for it."""

    layout: str
    product: str | None
    message: str
    layouts: tuple[str, ...] = ()
    # The layout is fine as far as can be told, but the node does not say how many GPUs
    # it has yet (GFD has not labelled it): what it offers after cannot be projected.
    unknown: bool = False

    def __str__(self) -> str:
        return self.message


def base_product(product: str) -> str:
    """The product GFD started from: `NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED` gives
    `NVIDIA-A100-SXM4-80GB` (no NVML name contains `-MIG-`)."""
    product = product.removesuffix(_SHARED_SUFFIX)
    return product.split(_MIG_SUFFIX, 1)[0]


@dataclass(frozen=True)
class MigTable:
    """Named MIG layouts (mig-parted's `mig-configs`) and the GPU products they are
    checked against. `default()` is the GPU Operator's; `from_config` a custom one."""

    source: str
    configs: Mapping[str, tuple[Entry, ...]]
    products: Mapping[str, Product]

    @classmethod
    def default(cls) -> MigTable:
        """The packaged tables: the GPU Operator's default mig-parted configuration and
        the known products. Read once."""
        return _default_table()

    @classmethod
    def from_config(cls, document: Mapping[str, Any], source: str) -> MigTable:
        """A custom mig-parted configuration (`version: v1`, `mig-configs: {...}`, as
        parsed from the ConfigMap's `config.yaml`) with the packaged products.

        It replaces the default layouts rather than adding to them: when ClusterPolicy
        `migManager.config.name` names a ConfigMap, the GPU Operator mounts that one alone
        and points mig-manager's CONFIG_FILE at it (gpu-operator controllers/
        object_controls.go, TransformMIGManager), so the default's layouts are gone.
        Raises MigConfigError listing everything mig-parted's parser would refuse."""
        return cls(source, _parse_config(document, source), _default_table().products)

    def product(self, label: str) -> Product | None:
        """The product a `nvidia.com/gpu.product` value names, suffixes stripped."""
        return self.products.get(base_product(label))

    def layouts(self, product: str) -> list[str]:
        """The names of the layouts mig-manager can apply to every GPU of `product` (a
        `nvidia.com/gpu.product` value, suffixes allowed), sorted. For a product this
        table does not know, only layouts that need no knowledge of the GPU: those that
        leave MIG off and filter on no device id."""
        known = self.product(product)
        return sorted(name for name in self.configs if self._fits(name, known))

    def projected(
        self,
        labels: Mapping[str, str],
        allocatable: Mapping[str, str],
        *,
        gpus: int | None = None,
        capacity: Mapping[str, str] | None = None,
    ) -> Projected | MigProblem:
        """What the node advertises once its `nvidia.com/mig.config` is applied.

        `labels` are the node's labels after the change (`nvidia.com/mig.config`,
        `nvidia.com/gpu.product`, `nvidia.com/gpu.count`, `nvidia.com/mig.strategy`,
        `nvidia.com/mig.capable`); `allocatable` its allocatable now. `gpus` gives the
        number of GPUs when the labels cannot: under strategy single, on a node already
        partitioned, GFD's `nvidia.com/gpu.count` counts MIG devices, not GPUs. Without
        that label (GFD has not run yet) the GPUs the device plugin advertises whole are
        counted, from `allocatable`, else `capacity`; when nothing tells, the problem is
        `unknown` (a layout that does not exist for the product is still refused)."""
        layout = labels.get(MIG_CONFIG)
        strategy = labels.get(MIG_STRATEGY, "none")
        if layout is None:
            return Projected(None, strategy, dict(allocatable), ())
        product_label = labels.get(GPU_PRODUCT)
        base = base_product(product_label) if product_label is not None else None
        product = self.products.get(base) if base is not None else None

        def problem(message: str, *, with_layouts: bool = False) -> MigProblem:
            # With no product label the GPU is as unknown as a product this table lacks.
            existing = tuple(self.layouts(base or ""))
            if with_layouts:
                named = base or "a GPU with no product label"
                message += f"; layouts for {named}: {', '.join(existing) or 'none'}"
            return MigProblem(layout, base, message, existing)

        if layout == "":
            return problem(f"label {MIG_CONFIG} is empty: mig-manager has no layout to apply")
        if layout not in self.configs:
            return problem(f"layout {layout} is not in {self.source}", with_layouts=True)
        if strategy not in STRATEGIES:
            return problem(
                f"{MIG_STRATEGY}={strategy} is not a MIG strategy ({', '.join(STRATEGIES)})"
            )
        shared = _sharing(labels)
        if shared is not None:
            return problem(
                f"the node's GPUs are shared ({shared}): the device plugin's sharing config "
                "multiplies each resource by its replicas, which no label gives for the "
                "resources a new layout makes; this projection does not model sharing"
            )
        entries = self.configs[layout]
        if labels.get(MIG_CAPABLE) == "false":
            if any(e.mig_enabled for e in entries):
                return problem(
                    f"the node's GPUs are not MIG-capable ({MIG_CAPABLE}=false): the GPU "
                    f"Operator runs no mig-manager there and layout {layout} changes nothing"
                )
            return Projected(layout, strategy, dict(allocatable), ())
        count = (
            gpus
            if gpus is not None
            else _gpu_count(labels, product_label, (allocatable, capacity or {}))
        )
        if isinstance(count, str):
            return problem(count)
        if count is None:
            # Whether the layout exists for the product is still told, from the GPUs it names.
            named = [i for e in entries if e.devices is not None for i in e.devices]
            probed = self._resolve(layout, base, product, range(max(named, default=0) + 1))
            if isinstance(probed, _Missing):
                return problem(probed.reason, with_layouts=True)
            return replace(
                problem(
                    f"label {GPU_COUNT} is missing and the node advertises no "
                    f"{GPU_RESOURCE} that counts its GPUs: the number of GPUs is unknown"
                ),
                unknown=True,
            )
        resolved = self._resolve(layout, base, product, range(count))
        if isinstance(resolved, _Missing):
            return problem(resolved.reason, with_layouts=True)
        if isinstance(resolved, str):
            return problem(resolved)
        advertised = _advertised(strategy, resolved)
        if isinstance(advertised, str):
            return problem(advertised)
        after = {
            k: v
            for k, v in allocatable.items()
            if k != GPU_RESOURCE and not k.startswith(MIG_RESOURCE_PREFIX)
        }
        after.update({k: str(v) for k, v in advertised.items()})
        return Projected(layout, strategy, after, resolved)

    def _fits(self, layout: str, product: Product | None) -> bool:
        # Every GPU index the layout names, or one GPU standing for all when it names
        # none: a layout exists for a product when those GPUs all take it.
        named = [i for e in self.configs[layout] if e.devices is not None for i in e.devices]
        gpus = range(max(named, default=0) + 1)
        return isinstance(self._resolve(layout, None, product, gpus), tuple)

    def _resolve(
        self, layout: str, base: str | None, product: Product | None, gpus: range
    ) -> tuple[Gpu, ...] | _Missing | str:
        """Each GPU's state after mig-parted applies `layout`; a `_Missing` when the layout
        does not exist for the product, a string when the labels cannot tell."""
        named = base or "a GPU with no product label"
        unknown = (
            f"{base} is not a GPU this table knows" if base else f"label {GPU_PRODUCT} is missing"
        )
        device = product.device_id if product is not None else None
        states: list[Gpu] = []
        uncovered: list[int] = []
        for index in gpus:
            chosen: Entry | None = None
            for entry in self.configs[layout]:
                applies = entry.applies(index, device)
                if applies is None and device is None:
                    return _Missing(
                        f"{unknown}, so layout {layout}'s device filters cannot be matched to it"
                    )
                if applies is None:
                    return (
                        f"layout {layout} filters on a subsystem id of {device}, "
                        "which no label carries"
                    )
                if applies:
                    chosen = entry
            if chosen is None:
                uncovered.append(index)
                continue
            if chosen.mig_enabled and product is None:
                return _Missing(
                    f"{unknown}, so whether it takes layout {layout}'s MIG instances cannot be told"
                )
            if chosen.mig_enabled and product is not None:
                refusal = product.refusal(chosen.mig_devices)
                if refusal is not None:
                    return _Missing(f"layout {layout} does not exist for {named}: {refusal}")
            states.append(Gpu(index, chosen.mig_enabled, chosen.mig_devices))
        if uncovered and len(uncovered) == len(gpus):
            return _Missing(
                f"layout {layout} does not exist for {named}: none of its entries "
                f"applies to device {device}"
            )
        if uncovered:
            return (
                f"layout {layout} has no entry for GPU {', '.join(map(str, uncovered))} "
                f"of {named}: mig-parted leaves those as they are, so their state after "
                "cannot be told"
            )
        return tuple(states)


@dataclass(frozen=True)
class _Missing:
    """A layout that does not exist for the node's GPU (as opposed to labels that cannot
    tell): its problem names the layouts that do."""

    reason: str


def _sharing(labels: Mapping[str, str]) -> str | None:
    """What says the node's GPUs are shared (time-slicing or MPS), or None."""
    product = labels.get(GPU_PRODUCT, "")
    if product.endswith(_SHARED_SUFFIX):
        return f"{GPU_PRODUCT}={product}"
    for key, value in sorted(labels.items()):
        if _REPLICAS.fullmatch(key) and value.isdigit() and int(value) > 1:
            return f"{key}={value}"
    return None


def _gpu_count(
    labels: Mapping[str, str], product: str | None, offered: Sequence[Mapping[str, str]]
) -> int | str | None:
    """The node's number of GPUs from `nvidia.com/gpu.count`, or, without that label, from
    the first of `offered` (allocatable, capacity) that advertises `nvidia.com/gpu`; why
    the label cannot be read; None when nothing tells."""
    value = labels.get(GPU_COUNT)
    if value is None:
        return _offered_gpus(product, offered)
    if not value.isdigit():
        return f"label {GPU_COUNT}={value!r} is not a number of GPUs"
    if product is not None and _MIG_SUFFIX in product.removesuffix(_SHARED_SUFFIX):
        return (
            f"{GPU_PRODUCT}={product}: under strategy single GFD counts MIG devices in "
            f"{GPU_COUNT}={value}, not GPUs; pass the number of GPUs"
        )
    return int(value)


def _offered_gpus(product: str | None, offered: Sequence[Mapping[str, str]]) -> int | None:
    """The GPUs the device plugin advertises, when they are the node's GPUs: the first
    resource list with `nvidia.com/gpu`, if no MIG instance is advertised beside it (a GPU
    partitioned under strategy mixed is not counted there) and the product is not named
    after one (under strategy single `nvidia.com/gpu` counts MIG devices). None otherwise,
    and for none or zero GPUs (no device plugin yet)."""
    if product is not None and _MIG_SUFFIX in product.removesuffix(_SHARED_SUFFIX):
        return None
    for listed in offered:
        value = listed.get(GPU_RESOURCE)
        if value is None:
            continue
        if any(
            k.startswith(MIG_RESOURCE_PREFIX) and v.strip() not in ("", "0")
            for k, v in listed.items()
        ):
            return None
        return int(value) if value.isdigit() and int(value) > 0 else None
    return None


def _advertised(strategy: str, gpus: tuple[Gpu, ...]) -> dict[str, int] | str:
    """The GPU resources the device plugin registers for `gpus` under `strategy`, or why
    it refuses to start (internal/rm/device_map.go, buildDeviceMapFromConfigResources)."""
    whole = sum(1 for gpu in gpus if not gpu.mig_enabled)
    if strategy == "none":
        return {GPU_RESOURCE: len(gpus)}
    instances: Counter[str] = Counter()
    for gpu in gpus:
        instances.update(gpu.mig_devices)
    if strategy == "single":
        partitioned = [gpu for gpu in gpus if gpu.mig_enabled]
        if not partitioned:
            return {GPU_RESOURCE: whole}
        if whole:
            return "strategy single needs all GPUs with MIG on or all off; this layout leaves some whole"
        empty = [str(gpu.index) for gpu in partitioned if not gpu.mig_devices]
        if empty:
            return f"strategy single refuses a GPU with MIG on and no instances (GPU {', '.join(empty)})"
        if len(instances) > 1:
            return f"strategy single needs one MIG profile on every GPU; this layout makes {', '.join(sorted(instances))}"
        return {GPU_RESOURCE: sum(instances.values())}
    # mixed: only profiles whose compute instance is the whole GPU instance are advertised
    # (internal/rm/rm.go, AddDefaultResourcesToConfig); another makes the plugin fail.
    advertised = {GPU_RESOURCE: whole}
    for name, total in sorted(instances.items()):
        profile = Profile.parse(name)
        if profile is None or profile.compute != profile.slices:
            return f"strategy mixed advertises no resource for {name} (a compute instance smaller than its GPU instance): the device plugin refuses it"
        advertised[profile.resource] = total
    return advertised


def _parse_config(document: Mapping[str, Any], source: str) -> Mapping[str, tuple[Entry, ...]]:
    """mig-parted's v1 spec (api/spec/v1/spec.go, UnmarshalJSON) with its checks; every
    refusal is collected, none stops the others from being found."""
    problems: list[str] = []
    if not isinstance(document, Mapping):
        raise MigConfigError(source, ["the document is not a mapping"])
    if document.get("version") != "v1":
        problems.append(f"version must be v1, not {document.get('version')!r}")
    problems.extend(
        f"unexpected field: {k}" for k in document if k not in {"version", "mig-configs"}
    )
    configs = document.get("mig-configs")
    if not isinstance(configs, Mapping) or not configs:
        problems.append("mig-configs: at least one layout is required")
        raise MigConfigError(source, problems)
    parsed: dict[str, tuple[Entry, ...]] = {}
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            problems.append(f"mig-configs.{name}: at least one entry is required")
            continue
        parsed[str(name)] = tuple(
            _parse_entry(entry, f"mig-configs.{name}[{i}]", problems)
            for i, entry in enumerate(entries)
        )
    if problems:
        raise MigConfigError(source, problems)
    return MappingProxyType(parsed)


def _parse_entry(entry: object, where: str, problems: list[str]) -> Entry:
    if not isinstance(entry, Mapping):
        problems.append(f"{where}: not a mapping")
        return Entry(None, (), False, {})
    allowed = {"device-filter", "devices", "mig-enabled", "mig-devices"}
    problems.extend(f"{where}: unexpected field: {k}" for k in entry if k not in allowed)
    problems.extend(
        f"{where}: missing required field: {k}"
        for k in ("devices", "mig-enabled")
        if k not in entry
    )
    devices: tuple[int, ...] | None = None
    raw = entry.get("devices", "all")
    if isinstance(raw, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in raw):
        devices = tuple(raw)
    elif raw != "all":
        problems.append(f"{where}.devices: 'all' or a list of GPU indexes, not {raw!r}")
    device_filter: list[DeviceId] = []
    raw = entry.get("device-filter", [])
    for text in [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else [raw]:
        try:
            device_filter.append(DeviceId.parse(text if isinstance(text, str) else ""))
        except ValueError:
            problems.append(f"{where}.device-filter: {text!r} is not a device id")
    enabled = entry.get("mig-enabled")
    if not isinstance(enabled, bool):
        problems.append(f"{where}.mig-enabled: true or false, not {enabled!r}")
        enabled = False
    mig_devices: dict[str, int] = {}
    raw = entry.get("mig-devices")
    if enabled and raw is None:
        problems.append(f"{where}: missing required field 'mig-devices' when 'mig-enabled' is true")
    elif raw is not None and not isinstance(raw, Mapping):
        problems.append(f"{where}.mig-devices: a mapping of MIG profile to count")
    elif raw:
        valid = True
        for name, count in raw.items():
            profile = Profile.parse(name) if isinstance(name, str) else None
            if profile is None:
                problems.append(f"{where}.mig-devices: {name!r} is not a MIG profile")
            elif not isinstance(count, int) or isinstance(count, bool) or count < 0:
                problems.append(f"{where}.mig-devices.{name}: {count!r} is not a count")
            elif count:
                mig_devices[profile.name] = mig_devices.get(profile.name, 0) + count
                continue
            else:
                continue
            valid = False
        if not enabled:
            problems.append(f"{where}: MIG devices included when 'mig-enabled' is false")
        elif valid and not mig_devices:
            problems.append(f"{where}.mig-devices: all counts are 0")
    return Entry(devices, tuple(device_filter), enabled, MappingProxyType(mig_devices))


def _read(parts: tuple[str, ...]) -> Any:
    return json.loads(resources.files(_DATA).joinpath(*parts).read_text(encoding="utf-8"))


def _products(document: Mapping[str, Any]) -> Mapping[str, Product]:
    families = document["profiles"]
    products: dict[str, Product] = {}
    for label, item in document["products"].items():
        family = families[item["profiles"]]
        products[label] = Product(
            label=label,
            name=item["name"],
            device_id=DeviceId.parse(item["device-id"]),
            family=item["profiles"],
            profiles=MappingProxyType(dict(family["profiles"])),
            compute_slices=family["compute-slices"],
            memory_slices=family["memory-slices"],
        )
    return MappingProxyType(products)


@cache
def _default_table() -> MigTable:
    layouts = _read(_LAYOUTS_FILE)
    origin = layouts["source"]
    source = f"{origin['repository']} {origin['path']} ({origin['tag']}, {origin['commit'][:12]})"
    return MigTable(
        source, _parse_config(layouts["config"], source), _products(_read(_PRODUCTS_FILE))
    )

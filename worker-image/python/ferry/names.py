"""Flash's resource names (GpuType, GpuGroup, CpuInstanceType and their strings) → Ferry resources.

The table is flash_names.json next to this file. This module is the one owner of the mapping: the
runtime's Endpoint validation uses it, and the build scanner (cli/build/scan.py) loads this file by
path, so `ferry build` and `import` agree on every name. It imports nothing from the ferry package
and stays compatible with Python 3.8 (the scanner runs under whatever python3 the user has).

    gpu=GpuGroup.ADA_24            → ["L4"]   (with a note: the nearest AWS model)
    gpu="NVIDIA GeForce RTX 4090"  → ["L4"]
    cpu=CpuInstanceType.CPU3C_1_2  → "1-2"    (1 vCPU, 2 GiB)
"""

import json
import os

_TABLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flash_names.json")

with open(_TABLE_FILE, "r", encoding="utf-8") as _handle:
    TABLE = json.load(_handle)


def _constants(rows, extra_prefix=None):
    found = {}
    for row in rows:
        found[row["constant"]] = row["value"]
        if extra_prefix:
            # GpuType.NVIDIA_GEFORCE_RTX_4090 is how the constants read in some Flash docs.
            found[extra_prefix + row["constant"]] = row["value"]
    return found


class _Constants(object):
    """A namespace of string constants, like Flash's enums (`GpuType.L4` is the string itself)."""

    def __init__(self, kind, values):
        self._kind = kind
        for key, value in values.items():
            setattr(self, key, value)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError("%s has no constant %r" % (self._kind, name))

    def __repr__(self):
        return "<ferry %s names>" % self._kind


GPU_TYPE_CONSTANTS = _constants(TABLE["gpuTypes"], "NVIDIA_")
GPU_GROUP_CONSTANTS = _constants(TABLE["gpuGroups"])
CPU_CONSTANTS = _constants(TABLE["cpuInstanceTypes"])
# What scan.py resolves `<Class>.<CONSTANT>` attribute expressions with.
CONSTANTS = {"GpuType": GPU_TYPE_CONSTANTS, "GpuGroup": GPU_GROUP_CONSTANTS, "CpuInstanceType": CPU_CONSTANTS}

GpuType = _Constants("GpuType", GPU_TYPE_CONSTANTS)
GpuGroup = _Constants("GpuGroup", GPU_GROUP_CONSTANTS)
CpuInstanceType = _Constants("CpuInstanceType", CPU_CONSTANTS)

_GPU_BY_VALUE = {}
for _row in TABLE["gpuGroups"] + TABLE["gpuTypes"]:
    _GPU_BY_VALUE[_row["value"]] = _row
_CPU_BY_VALUE = dict((row["value"], row) for row in TABLE["cpuInstanceTypes"])


def known_gpu_names():
    return sorted(v for v in _GPU_BY_VALUE if v != "any")


def known_cpu_names():
    return [row["value"] for row in TABLE["cpuInstanceTypes"]]


def _value_of(item):
    # A Flash enum member (e.g. from runpod_flash itself) carries its string in .value.
    value = getattr(item, "value", item)
    return value


def flash_gpu(item):
    """(ferry_models, note) for a Flash GPU name, or None when `item` is not one."""
    row = _GPU_BY_VALUE.get(_value_of(item)) if isinstance(_value_of(item), str) else None
    if row is None or row["value"] == "any":
        return None
    return list(row["ferry"]), row.get("note")


def flash_cpu(item):
    """(ferry_cpu, note) for a Flash CPU instance name such as 'cpu3c-1-2', or None."""
    value = _value_of(item)
    row = _CPU_BY_VALUE.get(value) if isinstance(value, str) else None
    if row is None:
        return None
    return row["ferry"], None


def translate_gpu(gpu, ferry_models):
    """`gpu` with every Flash name replaced by Ferry models, and the notes to print.

    Ferry's own names (ferry_models, 'any') pass through unchanged; anything else is left in place
    for the caller's validation to refuse (its message lists these names too)."""
    items = gpu if isinstance(gpu, (list, tuple)) else [gpu]
    out, notes = [], []
    for item in items:
        value = _value_of(item)
        if value in ferry_models or value == "any":
            out.append(value)
            continue
        found = flash_gpu(value)
        if found is None:
            out.append(value)
            continue
        models, note = found
        if note:
            notes.append("gpu %r: %s" % (value, note))
        out.extend(models)
    if not isinstance(gpu, (list, tuple)) and len(out) == 1:
        return out[0], notes
    return out, notes


def translate_cpu(cpu):
    """`cpu` as Ferry's 'VCPUS-GIB' when it is a Flash instance name (or a list of them), and notes."""
    if isinstance(cpu, (list, tuple)):
        if not cpu:
            return cpu, []
        first, notes = translate_cpu(cpu[0])
        if len(cpu) > 1:
            notes.append("cpu %r: Ferry runs one CPU size per endpoint; using the first, %r" % (list(map(_value_of, cpu)), first))
        return first, notes
    found = flash_cpu(cpu)
    if found is None:
        return _value_of(cpu), []
    return found[0], []


def unknown_gpu_hint():
    return "Flash names are accepted too: " + ", ".join(known_gpu_names())


def unknown_cpu_hint():
    return "Flash CPU instance names are accepted too: " + ", ".join(known_cpu_names())


FLASH_ONLY_PARAMETERS = dict(TABLE["flashOnlyParameters"])


def flash_parameter_message(name):
    """Why Flash's Endpoint parameter `name` is refused, naming what Ferry does instead; None when
    `name` is not one of Flash's. Ignoring one silently would deploy something other than what the
    code says (flash-style code is refused at build time and at import, with this one message)."""
    hint = FLASH_ONLY_PARAMETERS.get(name)
    if hint is None:
        return None
    return "Endpoint has no parameter '%s' in Ferry: %s" % (name, hint)

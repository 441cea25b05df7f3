"""A GPU from its datasheet: a hardware-facts record as a ``DeviceSpec``, checked field by field.

The record is the schema of the measured data's ``devices/gpus.json`` (``DATA.md``): units in
the field names (``mem_bw_gbps`` in GB/s, ``l2_mb`` in MiB, ``peak_tflops_fp16`` in dense
TFLOP/s), ``null`` where a value is unknown or the device lacks the rate. ``catalog_record``
is the one conversion from such a record to the catalog's SI record: ``scripts/build_catalog.py``
builds ``data/devices.json`` with it, and a spec file (``device="my_gpu.json"``) goes through it
too, so a catalog GPU given as a spec file is the catalog's ``DeviceSpec`` by construction.

Beyond gpus.json, a record may carry the facts that the catalog keeps in tables of its own
(``SPEC_FIELDS`` marks them ``extension``): ``aliases``, ``base_clock_mhz``, ``tdp_w``,
``issue_lanes_per_sm``, the dense peaks' ``*_sparse`` twins (only to check the dense figure),
and the interconnect (``peer_link*``, ``node_*``, ``pcie_*``, ``network*``). An optional fact
that is absent falls back as ``SPEC_FIELDS`` says, and a spec file says every fallback it used in
one ``SpecFallbackWarning``. A missing or impossible value raises one ``SpecError`` listing each
problem with its field, unit, and the value the most similar catalog GPU has.

A calibration profile is JSON too; ``read_device_file`` tells the two apart by content (a
profile has ``"format": "torch_gemm_cost.profile"``), never by file name.

By job: ``fields`` (the schema), ``arch`` (the architecture facts a datasheet leaves out),
``check`` (a record checked), ``similar`` (the catalog GPU an error quotes), ``convert`` (the
record as the catalog's and as a ``DeviceSpec``), ``record`` (the inverse), ``template`` (a
record to fill in) and ``files`` (spec files and profiles told apart).
"""

from .convert import catalog_record, spec_from_datasheet
from .fields import SPEC_FIELDS, SpecError, SpecFallbackWarning
from .files import PROFILE_FORMAT, PROFILE_VERSION, document_kind, load_spec_file, read_device_file
from .record import datasheet_record
from .similar import most_similar
from .template import TEMPLATE_FIELDS, template

__all__ = [
    "PROFILE_FORMAT",
    "PROFILE_VERSION",
    "SPEC_FIELDS",
    "TEMPLATE_FIELDS",
    "SpecError",
    "SpecFallbackWarning",
    "catalog_record",
    "datasheet_record",
    "document_kind",
    "load_spec_file",
    "most_similar",
    "read_device_file",
    "spec_from_datasheet",
    "template",
]

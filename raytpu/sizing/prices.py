"""TPU prices per chip-hour in one dated, cited table (:data:`DEFAULT_PRICES`, ``us-central1``) and the
``--prices FILE`` reader (same format, e.g. a negotiated price). Unpublished prices (flex-start, TPU7x) are ``None``,
never guessed; ``--region`` reads :data:`REGIONAL_CHIP_HOUR`. Source: skypilot-catalog ``vms.csv``
(docs/FACTS.md#sizing-prices)."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raytpu.core.common import errors
from raytpu.core.tpu.catalog import GENERATIONS

KINDS = ("on_demand", "spot", "flex_start")
"""Consumption options priced: on-demand, Spot VMs, flex-start (DWS)."""

DEFAULT_PRICES: dict[str, Any] = {
    "source": "https://cloud.google.com/tpu/pricing, figures from skypilot-org/skypilot-catalog "
              "catalogs/v8/gcp/vms.csv@006059e0 (Cloud Billing Catalog SKUs); see raytpu/sizing/prices.py",
    "read_on": "2026-12-02",
    "region": "us-central1",
    "currency": "USD",
    "per_chip_hour": {
        "v4": {"on_demand": 3.22, "spot": 0.9215, "flex_start": None, "region": "us-central2"},
        "v5e": {"on_demand": 1.20, "spot": 0.24493, "flex_start": None},
        "v5p": {"on_demand": 4.20, "spot": 0.8357, "flex_start": None},
        "v6e": {"on_demand": 2.70, "spot": 0.54421, "flex_start": None},
        "tpu7x": {"on_demand": None, "spot": None, "flex_start": None},
    },
}
"""The default price table, in the ``--prices`` file format."""

MAX_CHIP_HOUR = 1000.0
TABLE_KEYS = ("source", "read_on", "region", "currency", "per_chip_hour", "regions")
"""Every key a price table may have (``regions`` is what :meth:`PriceTable.to_json` writes beside its rows): another
(``curency``) is refused, never dropped."""

REGIONAL_CHIP_HOUR: dict[str, dict[str, tuple[float, float | None]]] = {
    # generation: {region: (on-demand, spot) USD per chip-hour}; a placeholder spot there is None here.
    # Source: skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv (docs/FACTS.md#sizing-prices)
    "v4": {"us-central2": (3.22, 0.9215)},
    "v5e": {
        "asia-east1": (1.38948, 0.55579), "asia-northeast1": (1.54104, 0.4244), "asia-southeast1": (1.56, 0.78),
        "europe-north1": (1.32132, 0.66066), "europe-west1": (1.32132, 0.52853), "europe-west3": (1.416, 0.38997),
        "europe-west4": (1.56, 0.44498), "northamerica-northeast1": (1.32132, 0.36389),
        "southamerica-west1": (1.716, 0.47259), "us-central1": (1.20, 0.24493), "us-east1": (1.20, 0.24493),
        "us-east4": (1.20, 0.6), "us-east5": (1.20, 0.6), "us-south1": (1.416, 0.5664),
        "us-west1": (1.20, 0.24493), "us-west4": (1.20, 0.48),
    },
    "v5p": {
        "europe-west1": (4.459455, 1.7837825), "europe-west4": (4.2525, 1.34849), "us-central1": (4.20, 0.8357),
        "us-east1": (4.20, 0.8357), "us-east5": (4.20, 1.68), "us-south1": (4.779, 1.3161375),
    },
    "v6e": {
        "asia-northeast1": (3.24, 0.94352), "asia-south1": (3.24, 2.27), "asia-southeast1": (2.97, 0.36292),
        "europe-west4": (2.97, 1.03748), "southamerica-west1": (2.70, None), "us-central1": (2.70, 0.54421),
        "us-east1": (2.70, 0.54421), "us-east4": (2.70, 0.57766), "us-east5": (2.70, 1.215),
        "us-south1": (2.70, 1.35), "us-west1": (2.70, 0.54421),
    },
}
"""Per chip-hour prices by generation and region for ``--region`` (the export's rows for v5e, v5p, v6e; its 700.0
placeholders left out); ``None`` (n/p) where not offered. us-central1's rows are :data:`DEFAULT_PRICES`'s."""


def regions() -> tuple[str, ...]:
    """Every region :data:`REGIONAL_CHIP_HOUR` prices a generation in, sorted."""
    return tuple(sorted({r for rows in REGIONAL_CHIP_HOUR.values() for r in rows}))


def regional_table(region: str, field: str = "--region") -> PriceTable:
    """The built-in table for ``region`` (:data:`REGIONAL_CHIP_HOUR`); InvalidInput listing the regions known."""
    if region not in regions():
        raise errors.InvalidInput(field, f"{region!r} has no recorded TPU prices",
                                  "one of " + ", ".join(regions()) + "; or --prices FILE for another region")
    per_chip_hour: dict[str, Any] = {}
    for gen in DEFAULT_PRICES["per_chip_hour"]:
        on_demand, spot = REGIONAL_CHIP_HOUR.get(gen, {}).get(region, (None, None))
        per_chip_hour[gen] = {"on_demand": on_demand, "spot": spot, "flex_start": None}
    return parse({**DEFAULT_PRICES, "region": region, "per_chip_hour": per_chip_hour}, "REGIONAL_CHIP_HOUR")


@dataclass(frozen=True)
class PriceTable:
    """Per chip-hour prices by generation and kind (None: not published in the table's source)."""

    source: str
    read_on: str
    region: str
    currency: str
    per_chip_hour: dict[str, dict[str, float | None]]
    regions: dict[str, str]

    def chip_hour(self, generation: str, kind: str) -> float | None:
        """The price of one chip for one hour, or None where the table has none."""
        return self.per_chip_hour.get(generation, {}).get(kind)

    def to_json(self) -> dict[str, Any]:
        """Source, date, region and the per-chip-hour table."""
        return {"source": self.source, "read_on": self.read_on, "region": self.region, "currency": self.currency,
                "per_chip_hour": self.per_chip_hour, "regions": self.regions}


def parse(data: Any, field: str = "--prices") -> PriceTable:
    """A price table from its JSON form; every problem names its key and what is valid."""
    if not isinstance(data, Mapping):
        raise errors.invalid_value(field, type(data).__name__, "is not a JSON object",
                                   "{source, read_on, region, per_chip_hour: {GENERATION: {on_demand, spot, "
                                   "flex_start}}}")
    unknown = sorted(str(k) for k in data if k not in TABLE_KEYS)
    if unknown:
        raise errors.invalid_choice(field, unknown[0], TABLE_KEYS, " as a price table's key")
    for key in ("source", "read_on", "region"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise errors.missing(f"{field}.{key}", "(every price carries its source, date and region)",
                                 "a non-empty string" + (" YYYY-MM-DD" if key == "read_on" else ""))
    try:
        datetime.date.fromisoformat(data["read_on"])
    except ValueError as exc:
        raise errors.invalid_value(f"{field}.read_on", data["read_on"], "is not a date", "YYYY-MM-DD") from exc
    table = data.get("per_chip_hour")
    if not isinstance(table, Mapping) or not table:
        raise errors.missing(f"{field}.per_chip_hour", "with at least one generation",
                             "{GENERATION: {on_demand, spot, flex_start}}")
    given_regions = data.get("regions", {})
    if not isinstance(given_regions, Mapping):
        raise errors.invalid_value(f"{field}.regions", given_regions, "is not an object", "{GENERATION: REGION}")
    for gen in given_regions:
        if gen not in GENERATIONS:
            raise errors.invalid_choice(f"{field}.regions", gen, GENERATIONS)
    prices: dict[str, dict[str, float | None]] = {}
    regions: dict[str, str] = {}
    for gen, row in table.items():
        where = f"{field}.per_chip_hour.{gen}"
        if gen not in GENERATIONS:
            raise errors.invalid_choice(f"{field}.per_chip_hour", gen, GENERATIONS)
        if not isinstance(row, Mapping):
            raise errors.invalid_value(where, row, "is not an object", "{on_demand, spot, flex_start}")
        extra = set(row) - set(KINDS) - {"region"}
        if extra:
            raise errors.invalid_choice(where, sorted(extra)[0], (*KINDS, "region"))
        prices[gen] = {}
        for kind in KINDS:
            value = row.get(kind)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not 0 < value <= MAX_CHIP_HOUR):
                raise errors.invalid_value(f"{where}.{kind}", value, "is not a price per chip-hour",
                                           f"a number in (0, {MAX_CHIP_HOUR:g}], or null where none is published")
            prices[gen][kind] = None if value is None else float(value)
        region = row.get("region", given_regions.get(gen, data["region"]))
        if not isinstance(region, str) or not region:
            raise errors.invalid_value(f"{where}.region", region, "is not a region", "a region name like us-east5")
        regions[gen] = region
    currency = data.get("currency", "USD")
    # Source: ISO 4217 (an alphabetic currency code is three uppercase letters, e.g. USD)
    if not (isinstance(currency, str) and re.fullmatch("[A-Z]{3}", currency)):
        raise errors.invalid_value(f"{field}.currency", currency, "is not a currency code", "USD")
    return PriceTable(data["source"], data["read_on"], data["region"], currency, prices, regions)


def default_table() -> PriceTable:
    """The built-in table (:data:`DEFAULT_PRICES`)."""
    return parse(DEFAULT_PRICES, "DEFAULT_PRICES")


def load(path: str, field: str = "--prices") -> PriceTable:
    """Reads a ``--prices`` JSON file (the :data:`DEFAULT_PRICES` format)."""
    data = errors.read_json_file(path, field, "a JSON price table like raytpu/sizing/prices.py DEFAULT_PRICES")
    return parse(data, field)


def per_million_tokens(dollars_per_hour: float | None, tokens_per_s: float | None) -> float | None:
    """$ per million output tokens at ``tokens_per_s`` (the slice's total decode rate)."""
    if dollars_per_hour is None or not tokens_per_s:
        return None
    return dollars_per_hour / (tokens_per_s * 3600) * 1e6

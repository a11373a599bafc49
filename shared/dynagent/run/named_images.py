"""Images a pool names by what publishes them, not by their id: an SSM parameter on AWS
(``aws.images``), an image family on GCP (``gcp.images``). A new release is then picked
up without editing the config.

The functions resolve each name themselves, at most once a minute, and decide and
launch with the image it names: the boot config hash then changes when the name moves,
and the pool's agents of the old image drift (``core.boot.drift``). A name that cannot
be read keeps its last image in a warm function; with none, the pool keeps the name,
which the cloud resolves at launch, and no agent is judged for drift until the name is
read again (``boot.drift`` knows no hash for an unresolved name).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from dynagent.core.config import Config, Pool

# How long a resolved image is used before its name is read again.
FRESH_FOR = timedelta(minutes=1)


class NameNotRead(Exception):
    """A name could not be read: the message says which, why, and what to check."""


@dataclass(frozen=True)
class ImageNames:
    """How one cloud names images: ``name_of`` a pool (None: it names an image by its
    id), ``read`` a name to an image (raising NameNotRead), and the pool ``with`` an
    image; ``what`` says for people which field and kind of name it is."""

    name_of: Callable[[Pool], Hashable | None]
    read: Callable[[Any], str]
    with_image: Callable[[Pool, str], Pool]
    what: Callable[[Any], str]


@dataclass
class NamedImages:
    """What each name last resolved to, and when: kept by a warm function."""

    names: ImageNames
    read: dict[Hashable, tuple[datetime, str]] = field(default_factory=dict)

    def resolved(self, config: Config, now: datetime, logger: Any) -> Config:
        """``config`` with each pool's named image replaced by the image its name holds;
        the same object when no pool names one."""
        pools: dict[str, Pool] = {}
        for name, pool in config.pools.items():
            key = self.names.name_of(pool)
            image = None if key is None else self._image(key, now, logger, name)
            pools[name] = pool if image is None else self.names.with_image(pool, image)
        if all(pools[name] is pool for name, pool in config.pools.items()):
            return config
        return config.model_copy(update={"pools": pools})

    def _image(self, key: Hashable, now: datetime, logger: Any, pool: str) -> str | None:
        last = self.read.get(key)
        if last is not None and now - last[0] < FRESH_FOR:
            return last[1]
        try:
            image = self.names.read(key)
        except NameNotRead as error:
            kept = f"; launches use {last[1]}, read before" if last else ""
            logger.error(f"{error}{kept}", extra={"pool": pool})
            return last[1] if last else None
        if last is not None and last[1] != image:
            logger.info(
                f"{self.names.what(key)} now names {image} (was {last[1]}): agents of the "
                "old image are replaced",
                extra={"pool": pool},
            )
        self.read[key] = (now, image)
        return image

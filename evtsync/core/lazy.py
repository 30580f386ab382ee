"""pandas, imported at its first use (issue 30: small commands start without pandas and pyarrow;
issue 48: the NCCL Inspector reading starts without them, ~0.3 s of CPU).

A module on such a path writes::

    if TYPE_CHECKING:
        import pandas as pd
    else:
        from evtsync.core.lazy import pd

and uses ``pd`` as usual inside its functions; only code that runs imports pandas (a
module-level ``pd.X`` would import it with the module).
"""

from __future__ import annotations

from typing import Any


class _Pandas:
    """Stands for the pandas module: each attribute is pandas', imported on the first access."""

    def __getattr__(self, name: str) -> Any:
        import pandas

        return getattr(pandas, name)

    def __repr__(self) -> str:
        return "<pandas, imported at its first use (evtsync.core.lazy)>"


pd: Any = _Pandas()

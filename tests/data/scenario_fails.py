import numpy
raise RuntimeError("boom at import")

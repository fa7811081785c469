"""``python -m vaemem``: the console script, for an environment whose scripts folder is not on PATH."""

from vaemem.entry import main

main()

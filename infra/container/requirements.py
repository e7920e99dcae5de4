"""Print the requirement lines of inferq's install (and of the extras named in argv[1], comma
separated) from pyproject.toml: the image installs them in a layer of their own, before the code."""

import sys
import tomllib

with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
wanted = list(project["dependencies"])
for extra in filter(None, (sys.argv[1] if len(sys.argv) > 1 else "").split(",")):
    # An extra that names inferq's own extras (dev names inferq[tools]): those are not on an index.
    wanted += [d for d in project["optional-dependencies"][extra] if not d.startswith("inferq")]
print("\n".join(wanted))

"""The package layout, which pyproject.toml cannot say: the import package is `inferq`, its source
folder is `services/` (the layout the project was given), and the files read at run time (`schemas/`,
`infra/`) ship inside it as `inferq.schemas` and `inferq.infra`, read with importlib.resources."""

from setuptools import find_packages, setup

PACKAGE_DIR = {"inferq": "services", "inferq.schemas": "schemas", "inferq.infra": "infra"}

setup(
    packages=[
        "inferq",
        *(f"inferq.{name}" for name in find_packages("services")),
        "inferq.schemas",
        "inferq.infra",
    ],
    package_dir=PACKAGE_DIR,
)

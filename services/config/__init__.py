"""`inferq config`: the one table of every service's settings, printed with the values in effect
(``show``, secrets masked) or as docs/configuration.md (``docs``).

=========  ==========================================================================
``table``  the services and the settings classes each reads; the table merged over them
           (one row per variable, with the services that read it) and its Markdown
``cli``    ``inferq config show [--service X]`` and ``inferq config docs``
=========  ==========================================================================
"""

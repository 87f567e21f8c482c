"""Agents over HTTP: satsuma's own API, A2A, AG-UI and MCP, behind tokens and scopes
(``satsuma serve``, docs/serve.md).

Needs the ``serve`` extra (``pip install 'satsuma[serve]'``): hypercorn's trio worker
and the MCP SDK's server pieces. Only the CLI imports this room; users import it as
``satsuma.serve``.
"""

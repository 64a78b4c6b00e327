"""`python -m jointfx.torchtitan <torchtitan train arguments>` (docs/torchtitan.md)."""

from jointfx.torchtitan.cli import main

main()

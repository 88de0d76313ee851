"""The audits of the stacks' real wheels: what each stack's closure holds and does, kept as data and checked.

A maintainers' tool beside the sglang-eagle3 package, never imported by it (tests/test_layers.py): it downloads and
reads every wheel of a stack's closure. One reader of a stack's closure (closure.py), one shape for every audit
(base.py), one list of them (registry.py), one command (``python -m sglang_eagle3_audits``, __main__.py). Each
stack's data and policies are in its data directory, nix/stacks/sglang-<version>/.
"""

"""What the tests share: fixtures' building blocks, the flake harness, stand-in drivers.

Test modules import from here, never from each other."""

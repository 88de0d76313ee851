"""Getting and changing an SGLang tree: a release fetched and unpacked (release.py), the patch series verified and
applied all or nothing (patchset.py). Reading a tree is source/'s; this layer sits above it."""

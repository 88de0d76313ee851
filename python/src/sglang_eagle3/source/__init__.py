"""Reading SGLang's source without importing it: where its tree is, what its code says
(call sites, conditions, all-reduce gates, EAGLE-3 capture), a draft's inputs. Getting and patching a tree is
trees/'s."""

"""The only code that imports PaddleX: the patcher, supported versions, the patch record, the routing rules,
the adapter contract and one adapter per PaddleX generation (:mod:`.paddlex_35`, :mod:`.paddlex_34`), and the
hooks a fork-patched PaddleX calls (:mod:`.fork_hooks`)."""

"""What an OM package is, with no PaddleX and no runtime: its files (:mod:`.package`), the manifest that says how
ATC built the OM (:mod:`.manifest`), and ATC's command-line syntax (:mod:`.atc`)."""

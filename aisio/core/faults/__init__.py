"""What goes wrong and what is done about it: the exception tree (:mod:`.errors`), the
``on_error`` policy and the skip marker (:mod:`.policy`), and the record of what was skipped
(:mod:`.report`). Imports nothing else of aisio.
"""

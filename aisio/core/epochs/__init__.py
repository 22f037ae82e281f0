"""Epochs, positions and resume: which shard each reader gets, each sample's position, what the
training loop has received and the state that resumes it (:mod:`.progress`), and the next epoch
as the training process announces it to long-lived readers (:mod:`.plan`).
"""

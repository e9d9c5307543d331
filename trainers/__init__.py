"""toolgym.trainers"""

"""toolgym.rewards"""

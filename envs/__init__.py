"""toolgym.envs"""

"""toolgym.data"""

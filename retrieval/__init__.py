"""toolgym.retrieval"""

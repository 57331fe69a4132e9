"""infer.tools"""

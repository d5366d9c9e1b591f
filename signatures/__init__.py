"""ragzoo.signatures"""

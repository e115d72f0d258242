"""The Dash frontend, mounted under /dashboard/ by the app factory. It reads through the store's query functions."""

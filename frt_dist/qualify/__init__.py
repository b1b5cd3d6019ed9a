"""`frt qualify`: measuring a route against its host and writing the receipt."""

"""Who is looking at a console page: signing in and out, the session cookie, and the refusal of forged requests."""

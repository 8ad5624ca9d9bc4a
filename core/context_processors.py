from .roles import is_operator, role_of


def roles(request):
    user = request.user
    return {"is_operator": is_operator(user), "user_role": role_of(user) if user.is_authenticated else ""}
